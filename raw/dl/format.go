package dl

import (
	"strconv"
	"strings"
	"unsafe"
)

// FormatVersion writes a library's version code as dotted parts. Each divisor extracts
// one part: the first is code/divisors[0], each later one is code/divisors[i] modulo
// divisors[i-1]/divisors[i]. NCCL (22907, divisors 10000, 100, 1) gives "2.29.7"; the CUDA
// driver (12020, divisors 1000, 10) gives "12.2". No divisors, or a divisor that is not
// positive or does not divide the one before it, gives the code in decimal.
func FormatVersion(code int, divisors ...int) string {
	if len(divisors) == 0 {
		return strconv.Itoa(code)
	}
	for i, d := range divisors {
		if d <= 0 || (i > 0 && divisors[i-1]%d != 0) {
			return strconv.Itoa(code)
		}
	}
	var b strings.Builder
	for i, d := range divisors {
		part := code / d
		if i > 0 {
			b.WriteByte('.')
			part %= divisors[i-1] / d
		}
		b.WriteString(strconv.Itoa(part))
	}
	return b.String()
}

// GoString copies the NUL-terminated C string at p, a string the library owns; nil gives "".
// Generated code uses it for strings a library returns through a pointer argument.
func GoString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
