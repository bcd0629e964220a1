package main

import (
	"debug/elf"
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

func TestRenameRewritesReferencesOnly(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not on PATH (apt-get install gcc)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "r.c")
	require.NoError(t, writeFile(src, "#include <stdlib.h>\nunsigned long long mine(const char *s) { return strtoull(s, 0, 16); }\n"))
	lib := filepath.Join(dir, "libr.so")
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	undefined := func() map[string]bool {
		f, err := elf.Open(lib)
		require.NoError(t, err)
		defer f.Close()
		syms, err := f.DynamicSymbols()
		require.NoError(t, err)
		m := map[string]bool{}
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF {
				m[s.Name] = true
			}
		}
		return m
	}
	require.True(t, undefined()["strtoull"])

	require.ErrorContains(t, patchFile(lib, "", nil, map[string]string{"strtoull": "strtoullx"}), "the new name is longer")
	require.ErrorContains(t, patchFile(lib, "", nil, map[string]string{"mine": "min"}), "is defined here")
	require.ErrorContains(t, patchFile(lib, "", nil, map[string]string{"nosuch": "x"}), "none of the symbols to rename")

	require.NoError(t, patchFile(lib, "", nil, map[string]string{"strtoull": "strtoul", "nosuch": "x"}))
	u := undefined()
	require.True(t, u["strtoul"], "the reference now names strtoul")
	require.False(t, u["strtoull"])
}
