package kernels

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

var smRE = regexp.MustCompile(`'sm_(\d+)'`)

// TestPTXAssemblesForEveryArchitectureFrom80 assembles the committed
// add.ptx with the cached ptxas (CUDA 11.8) for every real architecture
// from sm_80 on that it knows: sm_80 (A100), sm_86 (A10, A40, RTX 30xx),
// sm_87 (Orin), sm_89 (L4, L40S, RTX 40xx), sm_90 (H100) and whatever is
// newest, with warnings as errors. The driver JIT-compiles the PTX at
// load; a PTX that ptxas warns about is one the driver would also warn
// about, or assemble differently than add.cu asks (an ignored launch
// bound, spills).
func TestPTXAssemblesForEveryArchitectureFrom80(t *testing.T) {
	ptxas := filepath.Join(cachedInput(t, "tool", ptxasSet), "ptxas")
	help, err := exec.Command(ptxas, "--help").CombinedOutput()
	require.NoError(t, err, "ptxas --help: %s", help)
	var archs []int
	for _, m := range smRE.FindAllSubmatch(help, -1) {
		n, err := strconv.Atoi(string(m[1]))
		require.NoError(t, err)
		if n >= 80 && !slices.Contains(archs, n) {
			archs = append(archs, n)
		}
	}
	slices.Sort(archs)
	require.Subset(t, archs, []int{80, 86, 89, 90}, "architectures ptxas lists: %s", help)
	for _, sm := range archs {
		arch := "sm_" + strconv.Itoa(sm)
		t.Run(arch, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "add.cubin")
			cmd := exec.Command(ptxas, "-arch="+arch, "-O3", "--warn-on-spills", "-Werror", "-o", out, "add.ptx")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Run(), "ptxas -arch=%s add.ptx:\n%s", arch, stderr.String())
			require.Empty(t, stderr.String(), "ptxas printed diagnostics")
		})
	}
}
