package kernels_test

import (
	"fmt"

	"github.com/ncclgo/ncclgo/kernels"
)

// Two ranks' bf16 buffers summed as the 2-rank all-reduce path does: the
// peer's data is added in place, each element rounded once.
func ExampleAddBF16() {
	mine := []uint16{kernels.Float32ToBF16(1), kernels.Float32ToBF16(0.1), kernels.Float32ToBF16(3)}
	peer := []uint16{kernels.Float32ToBF16(1), kernels.Float32ToBF16(0.2), kernels.Float32ToBF16(-3)}
	if err := kernels.AddBF16(mine, peer); err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range mine {
		fmt.Printf("%#04x %g\n", v, kernels.BF16ToFloat32(v))
	}
	fmt.Println(kernels.AddBF16(mine, peer[:1]))
	// Output:
	// 0x4000 2
	// 0x3e9a 0.30078125
	// 0x0000 0
	// bf16 add: dst has 3 elements, src has 1: length mismatch
}
