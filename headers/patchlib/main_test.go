package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadSonameIsWhatTheLinkerWrote(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not on PATH (apt-get install gcc)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "x.c")
	require.NoError(t, writeFile(src, "int x(void) { return 1; }\n"))
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"-Wl,-soname,libx.so.3"}, "libx.so.3"},
		{nil, ""},
	} {
		lib := filepath.Join(dir, "libx.so")
		out, err := exec.Command("gcc", append([]string{"-shared", "-fPIC", "-o", lib, src}, c.flags...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		got, err := readSoname(lib)
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	_, err := readSoname(src)
	require.Error(t, err, "a C file is no ELF library")
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }
