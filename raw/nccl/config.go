package nccl

import (
	"reflect"
	"unsafe"
)

// NewConfig returns what NCCL_CONFIG_INITIALIZER gives: Size is the size of Config,
// Magic is ApiMagic, Version is this package's NCCL version (the header it was
// generated from), and every other field is "undefined" (ConfigUndefInt, or nil for
// pointers), so NCCL applies its own default. NCCL rejects a config not made this way:
// start from NewConfig and set the fields you need.
func NewConfig() Config {
	c := Config{
		Size:    uint64(unsafe.Sizeof(Config{})),
		Magic:   ApiMagic,
		Version: uint32(Version(Major, Minor, Patch)),
	}
	// Every field after the first three is an int (UNDEF_INT) or a pointer (UNDEF_PTR,
	// NULL: the zero value). Walking the fields keeps this right when a header adds one;
	// the test compares the bytes with gcc compiling NCCL_CONFIG_INITIALIZER.
	v := reflect.ValueOf(&c).Elem()
	for i := 3; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Int32 && f.CanSet() {
			f.SetInt(ConfigUndefInt)
		}
	}
	return c
}
