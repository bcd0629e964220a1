// Command patchlib edits a copy of Debian's libnccl.so.2 in place so that glibc 2.36
// (Debian 12) can load it: it clears the symbol version of the named symbols (what
// `patchelf --clear-symbol-version` does), optionally renames undefined symbols to
// older equivalents (-rename __isoc23_sscanf=sscanf: the name is rewritten in .dynstr, so
// the reference binds to glibc's classic function), and marks a required glibc version
// weak (VER_FLG_WEAK), so the loader no longer refuses the library for it.
// headers/fetch.sh runs it on the test copy only; nothing it touches is shipped.
//
// Symbols the file does not reference are ignored.
//
// Usage:
//
//	patchlib -weak GLIBC_2.38 [-rename OLD=NEW,...] FILE SYMBOL...
//	patchlib -soname FILE      print the file's DT_SONAME (what `objdump -p` shows)
package main

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

const verFlgWeak = 0x2

func main() {
	weak := flag.String("weak", "", "version requirement to mark weak, e.g. GLIBC_2.38")
	soname := flag.Bool("soname", false, "print the DT_SONAME of FILE and change nothing")
	rename := flag.String("rename", "", "OLD=NEW,...: rename undefined symbols (NEW no longer than OLD)")
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
	renames := map[string]string{}
	if *rename != "" {
		for _, kv := range strings.Split(*rename, ",") {
			o, n, ok := strings.Cut(kv, "=")
			if !ok || o == "" || n == "" {
				fmt.Fprintf(os.Stderr, "patchlib: -rename %q: want OLD=NEW\n", kv)
				os.Exit(2)
			}
			renames[o] = n
		}
	}
	if err := patchFile(flag.Arg(0), *weak, flag.Args()[1:], renames); err != nil {
		fmt.Fprintln(os.Stderr, "patchlib:", err)
		os.Exit(1)
	}
}

func patchFile(path, weak string, symbols []string, renames map[string]string) error {
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
	if len(renames) > 0 {
		if err := renameSymbols(f, data, renames); err != nil {
			return err
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

// renameSymbols rewrites, in data (the file's bytes), the .dynstr names of the undefined
// dynamic symbols in renames (those the file does not reference are ignored, but one
// must be there). A new name must not be longer than the old one, and no other
// name may start inside the bytes it overwrites.
func renameSymbols(f *elf.File, data []byte, renames map[string]string) error {
	dynsym, dynstr := f.Section(".dynsym"), f.Section(".dynstr")
	if dynsym == nil || dynstr == nil {
		return errors.New("no .dynsym or .dynstr section")
	}
	le := binary.LittleEndian
	const entSize = 24 // Elf64_Sym
	str := data[dynstr.Offset : dynstr.Offset+dynstr.Size]
	cstr := func(off uint32) string {
		end := off
		for int(end) < len(str) && str[end] != 0 {
			end++
		}
		return string(str[off:end])
	}
	var starts []uint32 // every name offset the symbol table uses
	type hit struct {
		off      uint32
		old, new string
	}
	var hits []hit
	for o := dynsym.Offset; o+entSize <= dynsym.Offset+dynsym.Size; o += entSize {
		name := le.Uint32(data[o:])
		shndx := elf.SectionIndex(le.Uint16(data[o+6:]))
		starts = append(starts, name)
		if n, ok := renames[cstr(name)]; ok {
			if shndx != elf.SHN_UNDEF {
				return fmt.Errorf("symbol %s is defined here: only references can be renamed", cstr(name))
			}
			hits = append(hits, hit{name, cstr(name), n})
		}
	}
	done := map[string]bool{}
	for _, h := range hits {
		if len(h.new) > len(h.old) {
			return fmt.Errorf("rename %s=%s: the new name is longer", h.old, h.new)
		}
		for _, s := range starts {
			if s > h.off && s <= h.off+uint32(len(h.new)) {
				return fmt.Errorf("rename %s=%s: another name starts inside %s", h.old, h.new, h.old)
			}
		}
		copy(data[dynstr.Offset+uint64(h.off):], append([]byte(h.new), 0))
		done[h.old] = true
	}
	if len(done) == 0 {
		return fmt.Errorf("none of the symbols to rename is referenced")
	}
	return nil
}
