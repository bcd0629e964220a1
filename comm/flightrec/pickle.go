package flightrec

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// The few pickle opcodes a flight-recorder dump uses (Python's pickle protocol 2, and
// the protocol-4 ones torch's and Python's picklers may add).
const (
	opProto          = 0x80
	opFrame          = 0x95
	opStop           = '.'
	opMark           = '('
	opEmptyDict      = '}'
	opEmptyList      = ']'
	opEmptyTuple     = ')'
	opSetItem        = 's'
	opSetItems       = 'u'
	opAppend         = 'a'
	opAppends        = 'e'
	opTuple          = 't'
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opNone           = 'N'
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opBinInt2        = 'M'
	opLong1          = 0x8a
	opBinFloat       = 'G'
	opBinUnicode     = 'X'
	opShortBinUnicde = 0x8c
	opBinUnicode8    = 0x8d
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opMemoize        = 0x94
	opBinGet         = 'h'
	opLongBinGet     = 'j'
)

// pickler appends pickle opcodes to a buffer.
type pickler struct{ b []byte }

func (p *pickler) begin()       { p.b = append(p.b, opProto, 2) }
func (p *pickler) end()         { p.b = append(p.b, opStop) }
func (p *pickler) dict()        { p.b = append(p.b, opEmptyDict, opMark) }
func (p *pickler) endDict()     { p.b = append(p.b, opSetItems) }
func (p *pickler) list()        { p.b = append(p.b, opEmptyList, opMark) }
func (p *pickler) endList()     { p.b = append(p.b, opAppends) }
func (p *pickler) tuple2()      { p.b = append(p.b, opTuple2) }
func (p *pickler) none()        { p.b = append(p.b, opNone) }
func (p *pickler) key(s string) { p.str(s) }

func (p *pickler) bool(v bool) {
	if v {
		p.b = append(p.b, opNewTrue)
	} else {
		p.b = append(p.b, opNewFalse)
	}
}

func (p *pickler) str(s string) {
	p.b = append(p.b, opBinUnicode)
	p.b = binary.LittleEndian.AppendUint32(p.b, uint32(len(s)))
	p.b = append(p.b, s...)
}

func (p *pickler) int(v int64) {
	switch {
	case v >= 0 && v < 1<<8:
		p.b = append(p.b, opBinInt1, byte(v))
	case v >= 0 && v < 1<<16:
		p.b = append(p.b, opBinInt2, byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.b = append(p.b, opBinInt)
		p.b = binary.LittleEndian.AppendUint32(p.b, uint32(int32(v)))
	default: // LONG1: little-endian two's complement, shortest form
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], uint64(v))
		n := 8
		for n > 1 && ((buf[n-1] == 0 && buf[n-2]&0x80 == 0) || (buf[n-1] == 0xff && buf[n-2]&0x80 != 0)) {
			n--
		}
		p.b = append(p.b, opLong1, byte(n))
		p.b = append(p.b, buf[:n]...)
	}
}

// optInt writes v, or None when ok is false.
func (p *pickler) optInt(v int64, ok bool) {
	if ok {
		p.int(v)
	} else {
		p.none()
	}
}

// Tuple is a Python tuple read from a pickle.
type Tuple []any

// List is a Python list read from a pickle (a pointer, so that the memo shares it).
type pyList struct{ items []any }

// unpickle reads one pickled value made of dicts, lists, tuples, str, int, float,
// bool and None: what flight-recorder dumps hold. Dicts become map[any]any, lists
// []any, tuples Tuple. Anything else is an error wrapping ErrFormat. The work and the
// memory it takes are bounded by len(data).
func unpickle(data []byte) (any, error) {
	u := unpickler{data: data}
	v, err := u.run()
	if err != nil {
		return nil, fmt.Errorf("%w: pickle at byte %d: %v", ErrFormat, u.pos, err)
	}
	budget := 2*len(data) + 16
	return finish(v, 0, &budget)
}

type unpickler struct {
	data  []byte
	pos   int
	stack []any
	marks []int
	memo  map[uint32]any
}

type markErr string

func (e markErr) Error() string { return string(e) }

func (u *unpickler) take(n int) ([]byte, error) {
	if n < 0 || len(u.data)-u.pos < n {
		return nil, markErr("truncated")
	}
	b := u.data[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, markErr("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

// popMark returns the items above the last mark and removes them and the mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, markErr("no mark")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, markErr("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

func setItems(d any, kv []any) error {
	m, ok := d.(map[any]any)
	if !ok {
		return markErr("setitems on a " + typeName(d))
	}
	if len(kv)%2 != 0 {
		return markErr("odd number of dict items")
	}
	for i := 0; i < len(kv); i += 2 {
		if !hashable(kv[i]) {
			return markErr("dict key of type " + typeName(kv[i]))
		}
		m[kv[i]] = kv[i+1]
	}
	return nil
}

func hashable(k any) bool {
	switch k.(type) {
	case string, int64, bool, nil, float64:
		return true
	}
	return false
}

func typeName(v any) string {
	switch v.(type) {
	case map[any]any:
		return "dict"
	case *pyList:
		return "list"
	case Tuple:
		return "tuple"
	case string:
		return "str"
	case int64:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	case nil:
		return "None"
	}
	return fmt.Sprintf("%T", v)
}

func (u *unpickler) run() (any, error) {
	for {
		b, err := u.take(1)
		if err != nil {
			return nil, err
		}
		op := b[0]
		switch op {
		case opProto:
			if _, err := u.take(1); err != nil {
				return nil, err
			}
		case opFrame:
			if _, err := u.take(8); err != nil {
				return nil, err
			}
		case opStop:
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			return v, nil
		case opMark:
			u.marks = append(u.marks, len(u.stack))
		case opEmptyDict:
			u.push(map[any]any{})
		case opEmptyList:
			u.push(&pyList{})
		case opEmptyTuple:
			u.push(Tuple{})
		case opNone:
			u.push(nil)
		case opNewTrue:
			u.push(true)
		case opNewFalse:
			u.push(false)
		case opBinInt1:
			b, err := u.take(1)
			if err != nil {
				return nil, err
			}
			u.push(int64(b[0]))
		case opBinInt2:
			b, err := u.take(2)
			if err != nil {
				return nil, err
			}
			u.push(int64(binary.LittleEndian.Uint16(b)))
		case opBinInt:
			b, err := u.take(4)
			if err != nil {
				return nil, err
			}
			u.push(int64(int32(binary.LittleEndian.Uint32(b))))
		case opLong1:
			n, err := u.take(1)
			if err != nil {
				return nil, err
			}
			b, err := u.take(int(n[0]))
			if err != nil {
				return nil, err
			}
			if len(b) > 8 {
				return nil, markErr("integer of " + strconv.Itoa(len(b)) + " bytes")
			}
			var v uint64
			for i := len(b) - 1; i >= 0; i-- {
				v = v<<8 | uint64(b[i])
			}
			if len(b) > 0 && len(b) < 8 && b[len(b)-1]&0x80 != 0 { // negative: sign-extend
				v |= ^uint64(0) << (8 * len(b))
			}
			u.push(int64(v))
		case opBinFloat:
			b, err := u.take(8)
			if err != nil {
				return nil, err
			}
			u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
		case opBinUnicode, opShortBinUnicde, opBinUnicode8:
			var n uint64
			switch op {
			case opShortBinUnicde:
				b, err := u.take(1)
				if err != nil {
					return nil, err
				}
				n = uint64(b[0])
			case opBinUnicode:
				b, err := u.take(4)
				if err != nil {
					return nil, err
				}
				n = uint64(binary.LittleEndian.Uint32(b))
			default:
				b, err := u.take(8)
				if err != nil {
					return nil, err
				}
				n = binary.LittleEndian.Uint64(b)
			}
			if n > uint64(len(u.data)) {
				return nil, markErr("truncated")
			}
			s, err := u.take(int(n))
			if err != nil {
				return nil, err
			}
			u.push(string(s))
		case opBinPut, opLongBinPut, opMemoize:
			var k uint32
			switch op {
			case opBinPut:
				b, err := u.take(1)
				if err != nil {
					return nil, err
				}
				k = uint32(b[0])
			case opLongBinPut:
				b, err := u.take(4)
				if err != nil {
					return nil, err
				}
				k = binary.LittleEndian.Uint32(b)
			default:
				k = uint32(len(u.memo))
			}
			v, err := u.top()
			if err != nil {
				return nil, err
			}
			if u.memo == nil {
				u.memo = map[uint32]any{}
			}
			u.memo[k] = v
		case opBinGet, opLongBinGet:
			var k uint32
			if op == opBinGet {
				b, err := u.take(1)
				if err != nil {
					return nil, err
				}
				k = uint32(b[0])
			} else {
				b, err := u.take(4)
				if err != nil {
					return nil, err
				}
				k = binary.LittleEndian.Uint32(b)
			}
			v, ok := u.memo[k]
			if !ok {
				return nil, markErr("memo " + strconv.Itoa(int(k)) + " not set")
			}
			u.push(v)
		case opSetItem:
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			k, err := u.pop()
			if err != nil {
				return nil, err
			}
			d, err := u.top()
			if err != nil {
				return nil, err
			}
			if err := setItems(d, []any{k, v}); err != nil {
				return nil, err
			}
		case opSetItems:
			kv, err := u.popMark()
			if err != nil {
				return nil, err
			}
			d, err := u.top()
			if err != nil {
				return nil, err
			}
			if err := setItems(d, kv); err != nil {
				return nil, err
			}
		case opAppend, opAppends:
			var items []any
			if op == opAppend {
				v, err := u.pop()
				if err != nil {
					return nil, err
				}
				items = []any{v}
			} else if items, err = u.popMark(); err != nil {
				return nil, err
			}
			l, err := u.top()
			if err != nil {
				return nil, err
			}
			pl, ok := l.(*pyList)
			if !ok {
				return nil, markErr("append to a " + typeName(l))
			}
			pl.items = append(pl.items, items...)
		case opTuple:
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			u.push(Tuple(items))
		case opTuple1, opTuple2, opTuple3:
			n := int(op-opTuple1) + 1
			t := make(Tuple, n)
			for i := n - 1; i >= 0; i-- {
				if t[i], err = u.pop(); err != nil {
					return nil, err
				}
			}
			u.push(t)
		default:
			return nil, markErr(fmt.Sprintf("unsupported opcode 0x%02x", op))
		}
	}
}

// maxDepth bounds the nesting finish follows (a dump nests 5 deep).
const maxDepth = 64

// finish turns lists into []any, checking that the value nests at most maxDepth deep
// and has at most *budget values (a memo can make a list contain itself, or share one
// list many times over).
func finish(v any, depth int, budget *int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: pickle nests more than %d deep", ErrFormat, maxDepth)
	}
	if *budget--; *budget < 0 {
		return nil, fmt.Errorf("%w: pickle shares more values than it holds", ErrFormat)
	}
	switch x := v.(type) {
	case *pyList:
		out := make([]any, len(x.items))
		for i, it := range x.items {
			f, err := finish(it, depth+1, budget)
			if err != nil {
				return nil, err
			}
			out[i] = f
		}
		return out, nil
	case Tuple:
		out := make(Tuple, len(x))
		for i, it := range x {
			f, err := finish(it, depth+1, budget)
			if err != nil {
				return nil, err
			}
			out[i] = f
		}
		return out, nil
	case map[any]any:
		out := make(map[any]any, len(x))
		for k, it := range x {
			f, err := finish(it, depth+1, budget)
			if err != nil {
				return nil, err
			}
			out[k] = f
		}
		return out, nil
	}
	return v, nil
}
