// Command patchlib edits a copy of Debian's libnccl.so.2 in place so that glibc 2.36
// (Debian 12) can load it: it clears the symbol version of the named symbols (what
// `patchelf --clear-symbol-version` does) and marks a required glibc version weak
// (VER_FLG_WEAK), so the loader no longer refuses the library for it. headers/fetch.sh
// runs it on the test copy only; nothing it touches is shipped.
//
// Symbols the file does not reference are ignored.
//
// Usage:
//
//	patchlib -weak GLIBC_2.38 FILE SYMBOL...
//	patchlib -soname FILE      print the file's DT_SONAME (what `objdump -p` shows)
package main

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
)

const verFlgWeak = 0x2

func main() {
	weak := flag.String("weak", "", "version requirement to mark weak, e.g. GLIBC_2.38")
	soname := flag.Bool("soname", false, "print the DT_SONAME of FILE and change nothing")
	flag.Parse()
	if *soname && flag.NArg() == 1 {
		s, err := readSoname(flag.Arg(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, "patchlib:", err)
			os.Exit(1)
		}
		fmt.Println(s)
		return
	}
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: patchlib -weak VERSION FILE SYMBOL...")
		os.Exit(2)
	}
	if err := patch(flag.Arg(0), *weak, flag.Args()[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "patchlib:", err)
		os.Exit(1)
	}
}

func patch(path, weak string, symbols []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return errors.New("only little-endian 64-bit ELF files are supported")
	}
	le := binary.LittleEndian
	want := map[string]bool{}
	for _, s := range symbols {
		want[s] = true
	}
	if len(want) > 0 {
		versym := f.Section(".gnu.version")
		if versym == nil {
			return errors.New("no .gnu.version section")
		}
		syms, err := f.DynamicSymbols()
		if err != nil {
			return err
		}
		for i, s := range syms {
			if !want[s.Name] {
				continue
			}
			// DynamicSymbols skips the null symbol at index 0.
			le.PutUint16(data[versym.Offset+2*uint64(i+1):], 1) // VER_NDX_GLOBAL
			delete(want, s.Name)
		}
		if len(want) == len(symbols) {
			return fmt.Errorf("none of the symbols %v is in %s", symbols, path)
		}
	}
	if weak != "" {
		vr := f.Section(".gnu.version_r")
		if vr == nil {
			return errors.New("no .gnu.version_r section")
		}
		strtab := f.Sections[vr.Link]
		str, err := strtab.Data()
		if err != nil {
			return err
		}
		name := func(off uint32) string {
			end := off
			for int(end) < len(str) && str[end] != 0 {
				end++
			}
			return string(str[off:end])
		}
		found := false
		need := vr.Offset
		for {
			cnt := le.Uint16(data[need+2:])
			aux := need + uint64(le.Uint32(data[need+8:]))
			for j := 0; j < int(cnt); j++ {
				if name(le.Uint32(data[aux+8:])) == weak {
					flags := le.Uint16(data[aux+4:])
					le.PutUint16(data[aux+4:], flags|verFlgWeak)
					found = true
				}
				next := le.Uint32(data[aux+12:])
				if next == 0 {
					break
				}
				aux += uint64(next)
			}
			next := le.Uint32(data[need+12:])
			if next == 0 {
				break
			}
			need += uint64(next)
		}
		if !found {
			return fmt.Errorf("version requirement %s not found", weak)
		}
	}
	return os.WriteFile(path, data, 0o644)
}

// readSoname returns the DT_SONAME of an ELF shared library ("" when it has none).
func readSoname(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	names, err := f.DynString(elf.DT_SONAME)
	if err != nil || len(names) == 0 {
		return "", err
	}
	return names[0], nil
}
