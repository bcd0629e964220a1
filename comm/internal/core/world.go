package core

// ElemUnset is the element type of a constructor's options before WithElementType: a
// Backend cannot be created with it (a silent default summed float32 data as
// bfloat16).
const ElemUnset DType = -1

// CheckWorld checks a rank, world size and element type at construction; option names
// the option that sets the element type, for the error when it was not given.
func CheckWorld(op string, rank, world int, elem DType, option string) error {
	if world < 1 {
		return &ArgError{Op: op, Arg: "world size", Value: world, Err: ErrInvalidSize, Reason: "must be at least 1"}
	}
	if err := CheckRank(op, "rank", rank, world); err != nil {
		return err
	}
	if elem == ElemUnset {
		return &ArgError{Op: op, Arg: "element type", Value: "unset", Err: ErrInvalidType,
			Reason: "pass " + option + " (the element type the backend's reductions sum)"}
	}
	if !elem.Valid() {
		return &ArgError{Op: op, Arg: "element type", Value: int32(elem), Err: ErrInvalidType}
	}
	return nil
}
