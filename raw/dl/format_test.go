package dl

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFormatVersion(t *testing.T) {
	for _, c := range []struct {
		code     int
		divisors []int
		want     string
	}{
		{22907, []int{10000, 100, 1}, "2.29.7"},
		{23007, []int{10000, 100, 1}, "2.30.7"},
		{2804, []int{1000, 100, 1}, "2.8.4"},
		{12020, []int{1000, 10}, "12.2"},
		{12040, []int{1000, 10}, "12.4"},
		{42, nil, "42"},
		{42, []int{0}, "42"},
		{42, []int{100, 7}, "42"},
	} {
		assert.Equal(t, c.want, FormatVersion(c.code, c.divisors...), "%d %v", c.code, c.divisors)
	}
}

func TestGoString(t *testing.T) {
	b := []byte("hello\x00world")
	assert.Equal(t, "hello", GoString(&b[0]))
	assert.Equal(t, "", GoString(nil))
}
