package main

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"
)

// Batches: many raw calls in one cgo crossing.
//
// For the functions a config lists under "batch", the generator writes a Batch type
// (zbatch.go) whose methods record a call (the same parameters as the package function)
// into an array laid out as a C struct, and a Run (zbatch_cgo.go) that passes the whole
// array to one C function, which calls each recorded function pointer in order and
// stores every result. ncclGroupStart/ncclGroupEnd are recorded like any other call.

// BatchConfig selects the functions a Batch can record.
type BatchConfig struct {
	// Functions are the C symbols that can be recorded. Each must return the config's
	// result type and take only integers, handles and untyped pointers (void *): the
	// record keeps the arguments as integers, so a typed out-pointer (int *, a handle *)
	// that Go code reads back has no place in it.
	Functions []string `json:"functions"`
	// Detail is the C function called, with zero arguments, right after the first failing
	// call, whose text becomes BatchError.Detail (ncclGetLastError); "" for none.
	Detail string `json:"detail"`
	// Reason says what the batch is for (the generated doc quotes it).
	Reason string `json:"reason"`
	// Inputs are typed pointer parameters that a function only reads during the call
	// (an array of descriptors it copies): the record keeps the address, and the Go
	// parameter is an unsafe.Pointer to memory that must stay valid, and not move,
	// until Run (C memory, or Go memory pinned with runtime.Pinner).
	Inputs []BatchInput `json:"inputs"`
}

// BatchInput names a typed pointer parameter a Batch may record (BatchConfig.Inputs).
type BatchInput struct {
	Function string `json:"function"`
	Param    string `json:"param"`
	Reason   string `json:"reason"`
}

const batchDetailLen = 1024 // bytes of detail text a BatchError keeps

// batchOp is one recordable function.
type batchOp struct {
	f      *Func
	op     int
	params []batchParam
}

type batchParam struct {
	goName string
	goType *jen.Statement
	kind   argKind
	cast   string // the C type the stored integer is cast to
}

// batchOps checks the config's batch functions against the API and plans each.
func (g *goPkg) batchOps() ([]*batchOp, *Func, error) {
	bc := g.cfg.Batch
	if len(bc.Functions) == 0 || bc.Reason == "" {
		return nil, nil, fmt.Errorf("batch needs functions and a reason")
	}
	byName := map[string]*Func{}
	for _, f := range g.api.Funcs {
		byName[f.Symbol] = f
	}
	inputs := map[[2]string]bool{}
	for _, in := range bc.Inputs {
		if in.Function == "" || in.Param == "" || in.Reason == "" {
			return nil, nil, fmt.Errorf("batch input needs a function, a parameter and a reason")
		}
		inputs[[2]string{in.Function, in.Param}] = false
	}
	var ops []*batchOp
	seen := map[string]bool{}
	for _, name := range bc.Functions {
		f := byName[name]
		if f == nil {
			return nil, nil, fmt.Errorf("batch function %s is not declared by %s (%s)", name, g.api.Header, g.api.Set)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("batch function %s is listed twice", name)
		}
		seen[name] = true
		if rt := f.Sig.Result; rt.Kind != Named || rt.Name != g.cfg.Result {
			return nil, nil, fmt.Errorf("batch function %s does not return %s", name, g.cfg.Result)
		}
		if f.Sig.Variadic {
			return nil, nil, fmt.Errorf("batch function %s is variadic", name)
		}
		op := &batchOp{f: f, op: len(ops) + 1}
		used := map[string]bool{}
		for i, p := range f.Sig.Params {
			kind, _, err := g.argOf(p.Type)
			if err != nil {
				return nil, nil, fmt.Errorf("batch function %s, parameter %s: %w", name, p.Name, err)
			}
			key := [2]string{name, p.Name}
			_, input := inputs[key]
			switch {
			case kind == argValue:
				return nil, nil, fmt.Errorf("batch function %s: parameter %s is a struct passed by value", name, p.Name)
			case kind == argPointer && typedPointee(p.Type) != nil && input:
				inputs[key] = true
			case kind == argPointer && typedPointee(p.Type) != nil:
				return nil, nil, fmt.Errorf("batch function %s: parameter %s is a typed pointer (%s), which Go code would read back; only void * buffers can be recorded", name, p.Name, cType(p.Type))
			case kind == argNumber && !isIntegerC(g.resolve(p.Type)):
				return nil, nil, fmt.Errorf("batch function %s: parameter %s (%s) is not an integer", name, p.Name, cType(p.Type))
			}
			gt, err := g.goType(p.Type)
			if err != nil {
				return nil, nil, fmt.Errorf("batch function %s, parameter %s: %w", name, p.Name, err)
			}
			if input {
				gt = jen.Qual("unsafe", "Pointer")
			}
			n := paramGoName(p.Name, i)
			if used[n] {
				n += itoa(i)
			}
			used[n] = true
			op.params = append(op.params, batchParam{goName: n, goType: gt, kind: kind, cast: g.mirrorDecl(unconst(p.Type), "")})
		}
		ops = append(ops, op)
	}
	for _, in := range bc.Inputs {
		if !inputs[[2]string{in.Function, in.Param}] {
			return nil, nil, fmt.Errorf("batch input %s.%s is not a typed pointer parameter of a batch function", in.Function, in.Param)
		}
	}
	var detail *Func
	if bc.Detail != "" {
		detail = byName[bc.Detail]
		if detail == nil {
			return nil, nil, fmt.Errorf("batch detail function %s is not declared by %s", bc.Detail, g.api.Header)
		}
		rt := detail.Sig.Result
		if rt.Kind != Pointer || rt.Elem.Kind != Scalar || rt.Elem.Name != "char" {
			return nil, nil, fmt.Errorf("batch detail function %s does not return const char *", bc.Detail)
		}
		for _, p := range detail.Sig.Params {
			if kind, _, err := g.argOf(p.Type); err != nil || kind == argValue {
				return nil, nil, fmt.Errorf("batch detail function %s: parameter %s cannot be zero", bc.Detail, p.Name)
			}
		}
	}
	return ops, detail, nil
}

// isIntegerC reports whether a resolved C type is an integer (or an enum).
func isIntegerC(t *CType) bool {
	switch t.Kind {
	case Enum:
		return true
	case Scalar, Named:
		return !strings.Contains(t.Name, "float") && !strings.Contains(t.Name, "double")
	}
	return false
}

// emitBatch writes zbatch.go (every build), zbatch_cgo.go and zbatch_nocgo.go.
func (g *goPkg) emitBatch() (map[string]*jen.File, error) {
	ops, detail, err := g.batchOps()
	if err != nil {
		return nil, err
	}
	maxArgs := 1
	for _, op := range ops {
		maxArgs = max(maxArgs, len(op.params))
	}
	resType := g.goTypeName(ops[0].f.Sig.Result)
	lib := g.cfg.Package

	common := jen.NewFile(g.cfg.Package)
	g.header(common)
	common.Const().Defs(
		jen.Comment("batchArgs is the most arguments a batchable function takes."),
		jen.Id("batchArgs").Op("=").Lit(maxArgs),
		jen.Comment("batchDetailLen is how many bytes of detail text a BatchError keeps."),
		jen.Id("batchDetailLen").Op("=").Lit(batchDetailLen),
		jen.Comment("batchNotRun is the result of a record that Run did not call."),
		jen.Id("batchNotRun").Op("=").Lit(-1<<31),
	)
	common.Comment("batchRecord is one recorded call. Its layout is the C struct " + g.cfg.CPrefix + "batch_rec of")
	common.Comment("zbatch_cgo.go: the function's address, its op number, the result after Run, and the")
	common.Comment("arguments as integers (pointers and handles as addresses, signed values sign-extended).")
	common.Type().Id("batchRecord").Struct(
		jen.Id("fp").Uintptr(),
		jen.Id("op").Uint32(),
		jen.Id("result").Int32(),
		jen.Id("args").Index(jen.Id("batchArgs")).Uint64(),
	)
	var names []jen.Code
	names = append(names, jen.Lit(""))
	for _, op := range ops {
		names = append(names, jen.Lit(op.f.Symbol))
	}
	common.Comment("batchFuncs names the function of each op number (0 is unused).")
	common.Var().Id("batchFuncs").Op("=").Index(jen.Op("...")).String().Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, names...)

	var list []string
	for _, op := range ops {
		list = append(list, op.f.GoName)
	}
	doc := fmt.Sprintf(`Batch records calls and makes them all in one cgo crossing: Run hands the recorded
array to one C function that calls each function in order and stores every result. %s

It records %s. Each method takes the same parameters as the package function of the
same name and only records the call (resolving the function, so a missing symbol is
reported here); nothing reaches the library before Run. Pointer arguments are kept as
addresses: they must be device memory, or host memory that is not Go memory (C or
pinned allocations), and stay valid until Run.

A Batch is reused: Reset empties it, keeping its memory, so recording and running a
group allocates nothing once the array has grown to the group's size; Run can also run
the same recorded calls again. A Batch is not safe for concurrent use.`, bc(g).Reason, joinAnd(list))
	comment(common, wrap(doc, 88))
	common.Type().Id("Batch").Struct(
		jen.Id("recs").Index().Id("batchRecord"),
		jen.Id("err").Id("BatchError"),
	)

	comment(common, wrap(fmt.Sprintf(`BatchError is the first failing call of a Run: its position among the recorded calls, the
function, what it returned and the library's own text about it (%s right
after the call, before any later call could replace it). It unwraps to the %s, so
errors.Is with one of the package's %s constants and errors.As(err, &result) work.

Run returns a pointer to an error kept in the Batch: it stays valid until the next Run or
Reset (copy the value to keep it longer).`, orNone(g.cfg.Batch.Detail), resType, resType), 88))
	common.Type().Id("BatchError").Struct(
		jen.Comment("Index is the failing call's position among the recorded calls, from 0."),
		jen.Id("Index").Int(),
		jen.Comment("Calls is how many calls were recorded."),
		jen.Id("Calls").Int(),
		jen.Comment("Func is the C name of the failing function."),
		jen.Id("Func").String(),
		jen.Comment("Result is what the call returned."),
		jen.Id("Result").Id(resType),
		jen.Line(),
		jen.Id("detail").Index(jen.Id("batchDetailLen")).Byte(),
	)
	common.Comment("Detail is the library's text about the failure (empty when it had none).")
	common.Func().Params(jen.Id("e").Op("*").Id("BatchError")).Id("Detail").Params().String().Block(
		jen.For(jen.List(jen.Id("i"), jen.Id("c")).Op(":=").Range().Id("e").Dot("detail")).Block(
			jen.If(jen.Id("c").Op("==").Lit(0)).Block(jen.Return(jen.String().Call(jen.Id("e").Dot("detail").Index(jen.Empty(), jen.Id("i"))))),
		),
		jen.Return(jen.String().Call(jen.Id("e").Dot("detail").Index(jen.Empty(), jen.Empty()))),
	)
	common.Comment("Error names the call, then the result's message and the detail.")
	common.Func().Params(jen.Id("e").Op("*").Id("BatchError")).Id("Error").Params().String().Block(
		jen.Id("msg").Op(":=").Qual("fmt", "Sprintf").Call(jen.Lit(lib+" batch: call %d of %d (%s): %v"),
			jen.Id("e").Dot("Index"), jen.Id("e").Dot("Calls"), jen.Id("e").Dot("Func"), jen.Id("e").Dot("Result")),
		jen.If(jen.Id("d").Op(":=").Id("e").Dot("Detail").Call(), jen.Id("d").Op("!=").Lit("")).Block(
			jen.Id("msg").Op("+=").Lit(": ").Op("+").Id("d"),
		),
		jen.Return(jen.Id("msg")),
	)
	common.Commentf("Unwrap returns the %s.", resType)
	common.Func().Params(jen.Id("e").Op("*").Id("BatchError")).Id("Unwrap").Params().Error().Block(jen.Return(jen.Id("e").Dot("Result")))

	common.Comment("Len is the number of recorded calls.")
	common.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id("Len").Params().Int().Block(jen.Return(jen.Len(jen.Id("b").Dot("recs"))))
	common.Comment("Reset forgets the recorded calls and their results, keeping the memory.")
	common.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id("Reset").Params().Block(jen.Id("b").Dot("recs").Op("=").Id("b").Dot("recs").Index(jen.Empty(), jen.Lit(0)))
	common.Comment("Result returns what recorded call i returned in the last Run, and false when Run did")
	common.Comment("not call it (not run yet, skipped after a failure, or i out of range).")
	common.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id("Result").Params(jen.Id("i").Int()).Params(jen.Id(resType), jen.Bool()).Block(
		jen.If(jen.Id("i").Op("<").Lit(0).Op("||").Id("i").Op(">=").Len(jen.Id("b").Dot("recs")).Op("||").Id("b").Dot("recs").Index(jen.Id("i")).Dot("result").Op("==").Id("batchNotRun")).Block(
			jen.Return(jen.Lit(0), jen.False()),
		),
		jen.Return(jen.Id(resType).Call(jen.Id("b").Dot("recs").Index(jen.Id("i")).Dot("result")), jen.True()),
	)
	common.Comment("add resolves a function and appends a record of it, to be filled by the caller. The")
	common.Comment("slice grows only when full; a reused record keeps stale arguments past the op's own,")
	common.Comment("which the C side never reads.")
	common.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id("add").Params(jen.Id("sym").Op("*").Qual(dlPath, "Symbol"), jen.Id("op").Uint32()).Params(jen.Op("*").Id("batchRecord"), jen.Error()).Block(
		jen.List(jen.Id("fp"), jen.Err()).Op(":=").Id("lib").Dot("Resolve").Call(jen.Id("sym")),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Id("n").Op(":=").Len(jen.Id("b").Dot("recs")),
		jen.If(jen.Id("n").Op("==").Cap(jen.Id("b").Dot("recs"))).Block(
			jen.Id("b").Dot("recs").Op("=").Append(jen.Id("b").Dot("recs"), jen.Id("batchRecord").Values()),
		).Else().Block(
			jen.Id("b").Dot("recs").Op("=").Id("b").Dot("recs").Index(jen.Empty(), jen.Id("n").Op("+").Lit(1)),
		),
		jen.Id("r").Op(":=").Op("&").Id("b").Dot("recs").Index(jen.Id("n")),
		jen.List(jen.Id("r").Dot("fp"), jen.Id("r").Dot("op"), jen.Id("r").Dot("result")).Op("=").List(jen.Id("fp"), jen.Id("op"), jen.Id("batchNotRun")),
		jen.Return(jen.Id("r"), jen.Nil()),
	)
	common.Comment("failure fills the Batch's error for the failing record i.")
	common.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id("failure").Params(jen.Id("i").Int()).Error().Block(
		jen.Id("b").Dot("err").Dot("Index").Op("=").Id("i"),
		jen.Id("b").Dot("err").Dot("Calls").Op("=").Len(jen.Id("b").Dot("recs")),
		jen.Id("b").Dot("err").Dot("Func").Op("=").Id("batchFuncs").Index(jen.Id("b").Dot("recs").Index(jen.Id("i")).Dot("op")),
		jen.Id("b").Dot("err").Dot("Result").Op("=").Id(resType).Call(jen.Id("b").Dot("recs").Index(jen.Id("i")).Dot("result")),
		jen.Return(jen.Op("&").Id("b").Dot("err")),
	)

	for _, op := range ops {
		var params []jen.Code
		rec := jen.Id("r")
		if len(op.params) == 0 {
			rec = jen.Id("_")
		}
		body := []jen.Code{
			jen.List(rec, jen.Err()).Op(":=").Id("b").Dot("add").Call(jen.Op("&").Id(symVar(op.f.Symbol)), jen.Lit(op.op)),
			jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
		}
		for i, p := range op.params {
			params = append(params, jen.Id(p.goName).Add(p.goType))
			var v jen.Code
			if p.kind == argPointer {
				v = jen.Uint64().Call(jen.Uintptr().Call(jen.Id(p.goName)))
			} else {
				v = jen.Uint64().Call(jen.Id(p.goName))
			}
			body = append(body, jen.Id("r").Dot("args").Index(jen.Lit(i)).Op("=").Add(v))
		}
		body = append(body, jen.Return(jen.Nil()))
		common.Commentf("%s records a call of %s (see %s).", op.f.GoName, op.f.Symbol, op.f.GoName)
		common.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id(op.f.GoName).Params(params...).Error().Block(body...)
	}

	// The cgo side: the record struct, one C loop over the records.
	m := newMirror(g)
	for _, op := range ops {
		for _, p := range op.f.Sig.Params {
			if err := m.need(p.Type, true); err != nil {
				return nil, fmt.Errorf("batch function %s: %w", op.f.Symbol, err)
			}
		}
		if err := m.need(op.f.Sig.Result, true); err != nil {
			return nil, err
		}
	}
	if detail != nil {
		for _, p := range detail.Sig.Params {
			if err := m.need(p.Type, true); err != nil {
				return nil, err
			}
		}
	}
	var pre strings.Builder
	pre.WriteString("#include <stddef.h>\n#include <stdint.h>\n\n")
	pre.WriteString("// Declarations mirroring the header (not available at build time).\n")
	pre.WriteString(m.out.String())
	fmt.Fprintf(&pre, "\ntypedef struct {\n\tuintptr_t fp;\n\tuint32_t op;\n\tint32_t result;\n\tuint64_t a[%d];\n} "+g.cfg.CPrefix+"batch_rec;\n\n", maxArgs)
	pre.WriteString("// " + g.cfg.CPrefix + "batch_run calls the n records in order and stores each result; after the\n")
	pre.WriteString("// first failure it calls the detail function (when there is one) and copies its text,\n")
	pre.WriteString("// and with stop set marks the remaining records not run. It returns the index of the\n")
	pre.WriteString("// first failure, or -1.\n")
	pre.WriteString("#cgo noescape " + g.cfg.CPrefix + "batch_run\n#cgo nocallback " + g.cfg.CPrefix + "batch_run\n")
	pre.WriteString("static int " + g.cfg.CPrefix + "batch_run(" + g.cfg.CPrefix + "batch_rec *r, int n, int stop, uintptr_t detail, char *text, int cap) {\n")
	pre.WriteString("\tint first = -1;\n\tfor (int i = 0; i < n; i++) {\n\t\tint res;\n\t\tswitch (r[i].op) {\n")
	for _, op := range ops {
		fnType := g.mirrorDecl(&CType{Kind: Pointer, Elem: &CType{Kind: FuncPtr, Sig: unnamed(op.f.Sig)}}, "")
		var args []string
		for i, p := range op.params {
			if p.kind == argNumber {
				args = append(args, fmt.Sprintf("(%s)r[i].a[%d]", p.cast, i))
			} else {
				args = append(args, fmt.Sprintf("(%s)(uintptr_t)r[i].a[%d]", p.cast, i))
			}
		}
		fmt.Fprintf(&pre, "\t\tcase %d: // %s\n\t\t\tres = (int)((%s)r[i].fp)(%s);\n\t\t\tbreak;\n", op.op, op.f.Symbol, fnType, strings.Join(args, ", "))
	}
	pre.WriteString("\t\tdefault:\n\t\t\treturn -2 - i;\n\t\t}\n\t\tr[i].result = res;\n\t\tif (res == 0 || first >= 0) continue;\n\t\tfirst = i;\n")
	if detail != nil {
		fnType := g.mirrorDecl(&CType{Kind: Pointer, Elem: &CType{Kind: FuncPtr, Sig: unnamed(detail.Sig)}}, "")
		var zeros []string
		for _, p := range detail.Sig.Params {
			zeros = append(zeros, fmt.Sprintf("(%s)0", g.mirrorDecl(unconst(p.Type), "")))
		}
		fmt.Fprintf(&pre, "\t\tif (detail) {\n\t\t\tconst char *s = ((%s)detail)(%s);\n", fnType, strings.Join(zeros, ", "))
		pre.WriteString("\t\t\tint k = 0;\n\t\t\tfor (; s && s[k] && k < cap - 1; k++) text[k] = s[k];\n\t\t\ttext[k] = 0;\n\t\t}\n")
	}
	pre.WriteString("\t\tif (stop) {\n\t\t\tfor (int j = i + 1; j < n; j++) r[j].result = INT32_MIN;\n\t\t\treturn first;\n\t\t}\n\t}\n\treturn first;\n}\n")

	cgo := jen.NewFile(g.cfg.Package)
	cgo.HeaderComment("//go:build cgo")
	g.header(cgo)
	cgo.CgoPreamble(pre.String())
	run := func(f *jen.File, name, what string, stop bool, cgoBody bool) {
		comment(f, what)
		var body []jen.Code
		if !cgoBody {
			body = []jen.Code{jen.Return(jen.Qual(dlPath, "ErrNeedsCgo"))}
		} else {
			stopArg := jen.Id("stop")
			var detailFp []jen.Code
			detailArg := jen.Qual("C", "uintptr_t").Call(jen.Lit(0))
			if detail != nil {
				detailFp = []jen.Code{
					jen.Comment("A library without the detail function still runs the batch."),
					jen.List(jen.Id("dfp"), jen.Id("_")).Op(":=").Id("lib").Dot("Resolve").Call(jen.Op("&").Id(symVar(detail.Symbol))),
				}
				detailArg = jen.Qual("C", "uintptr_t").Call(jen.Id("dfp"))
			}
			body = append([]jen.Code{
				jen.If(jen.Len(jen.Id("b").Dot("recs")).Op("==").Lit(0)).Block(jen.Return(jen.Nil())),
				jen.Id("b").Dot("err").Dot("detail").Index(jen.Lit(0)).Op("=").Lit(0),
			}, detailFp...)
			body = append(body,
				jen.Id("i").Op(":=").Int().Call(jen.Qual("C", ""+g.cfg.CPrefix+"batch_run").Call(
					jen.Parens(jen.Op("*").Qual("C", ""+g.cfg.CPrefix+"batch_rec")).Call(jen.Qual("unsafe", "Pointer").Call(jen.Op("&").Id("b").Dot("recs").Index(jen.Lit(0)))),
					jen.Qual("C", "int").Call(jen.Len(jen.Id("b").Dot("recs"))), stopArg, detailArg,
					jen.Parens(jen.Op("*").Qual("C", "char")).Call(jen.Qual("unsafe", "Pointer").Call(jen.Op("&").Id("b").Dot("err").Dot("detail").Index(jen.Lit(0)))),
					jen.Id("batchDetailLen"))),
				jen.Switch().Block(
					jen.Case(jen.Id("i").Op("==").Lit(-1)).Block(jen.Return(jen.Nil())),
					jen.Case(jen.Id("i").Op("<").Lit(-1)).Block(jen.Return(jen.Qual("fmt", "Errorf").Call(
						jen.Lit(lib+" batch: record %d has unknown op %d"), jen.Lit(-2).Op("-").Id("i"), jen.Id("b").Dot("recs").Index(jen.Lit(-2).Op("-").Id("i")).Dot("op")))),
				),
				jen.Return(jen.Id("b").Dot("failure").Call(jen.Id("i"))),
			)
		}
		if cgoBody {
			f.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id(name).Params(jen.Id("stop").Qual("C", "int")).Error().Block(body...)
		} else {
			f.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id(name).Params().Error().Block(body...)
		}
	}
	runDoc := `Run makes every recorded call, in order, in one cgo crossing, whatever the earlier ones
returned: inside a group NCCL defers errors to ncclGroupEnd, which must still be called.
It returns nil when all succeeded, else a *BatchError for the first failing call; Result
gives each call's own result. An empty Batch returns nil at once.`
	stopDoc := `RunUntilFailure is Run, except that it stops at the first failing call: the calls after it
are not made (Result reports them not run).`
	nocgo := jen.NewFile(g.cfg.Package)
	nocgo.HeaderComment("//go:build !cgo")
	g.header(nocgo)
	run(cgo, "run", "run makes the recorded calls in one crossing; with stop non-zero it stops at the first\nfailure.", false, true)
	comment(cgo, runDoc)
	cgo.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id("Run").Params().Error().Block(jen.Return(jen.Id("b").Dot("run").Call(jen.Lit(0))))
	comment(cgo, stopDoc)
	cgo.Func().Params(jen.Id("b").Op("*").Id("Batch")).Id("RunUntilFailure").Params().Error().Block(jen.Return(jen.Id("b").Dot("run").Call(jen.Lit(1))))
	run(nocgo, "Run", runDoc, false, false)
	run(nocgo, "RunUntilFailure", stopDoc, true, false)
	return map[string]*jen.File{"zbatch.go": common, "zbatch_cgo.go": cgo, "zbatch_nocgo.go": nocgo}, nil
}

func bc(g *goPkg) *BatchConfig { return g.cfg.Batch }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// joinAnd lists names as "A, B and C".
func joinAnd(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
