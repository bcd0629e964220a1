package core

// Apply applies opts (functional options; nil ones are skipped) to o.
func Apply[T any, O ~func(*T)](o *T, opts []O) {
	for _, f := range opts {
		if f != nil {
			f(o)
		}
	}
}
