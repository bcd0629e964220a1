package core

// checkWorld checks a rank, world size and element type at construction.
func CheckWorld(op string, rank, world int, elem DType) error {
	if world < 1 {
		return &ArgError{Op: op, Arg: "world size", Value: world, Err: ErrInvalidSize, Reason: "must be at least 1"}
	}
	if err := CheckRank(op, "rank", rank, world); err != nil {
		return err
	}
	if !elem.Valid() {
		return &ArgError{Op: op, Arg: "element type", Value: int32(elem), Err: ErrInvalidType}
	}
	return nil
}
