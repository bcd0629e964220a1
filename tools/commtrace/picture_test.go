package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/stretchr/testify/require"
)

// writeSplitSkip writes the dumps of 4 ranks recording as comm/mpi does: three rounds
// of an all-reduce on a parity split "mpi:0:split1" then one on the world "mpi:0";
// rank 2 skips its third on the split, so rank 0 waits there and never reaches the
// world's third.
func writeSplitSkip(t *testing.T, dir string) {
	t.Helper()
	world := []int{0, 1, 2, 3}
	call := flightrec.Call{Op: flightrec.AllReduce, In: 1024, Out: 1024, Type: flightrec.Float32}
	for r := range 4 {
		rec, err := flightrec.New(flightrec.Config{Entries: 32, DumpFile: filepath.Join(dir, "rank_")}, r)
		require.NoError(t, err)
		w, err := rec.Comm(flightrec.Group{Name: "mpi:0", Desc: "default_pg", Ranks: world, Backend: "gloo", Blocking: true})
		require.NoError(t, err)
		s, err := rec.Comm(flightrec.Group{Name: "mpi:0:split1", Desc: "split", ID: 1, Ranks: []int{r % 2, r%2 + 2}, Backend: "gloo", Blocking: true})
		require.NoError(t, err)
		for i := 1; i <= 3; i++ {
			if i < 3 || r != 2 {
				id := s.Record(call)
				if i == 3 && r == 0 {
					break
				}
				s.CompletedLater(id)
			}
			id := w.Record(call)
			if i < 3 {
				w.CompletedLater(id)
			}
		}
		require.NoError(t, rec.Close())
		_, err = rec.WriteFile()
		require.NoError(t, err)
	}
}

// node is an element of a parsed document.
type node struct {
	name     string
	attr     map[string]string
	children []*node
	text     string
}

// parse reads a whole XML document strictly: a file that is not well-formed fails.
func parse(t *testing.T, data []byte) *node {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	root := &node{name: "#document"}
	stack := []*node{root}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "not well-formed")
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{name: tok.Name.Local, attr: map[string]string{}}
			for _, a := range tok.Attr {
				n.attr[a.Name.Local] = a.Value
			}
			top := stack[len(stack)-1]
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			stack[len(stack)-1].text += string(tok)
		}
	}
	require.Len(t, stack, 1, "unclosed elements")
	return root
}

// find returns the elements under n (n included) for which ok holds, in document order.
func find(n *node, ok func(*node) bool) []*node {
	var out []*node
	if ok(n) {
		out = append(out, n)
	}
	for _, c := range n.children {
		out = append(out, find(c, ok)...)
	}
	return out
}

func classed(class string) func(*node) bool {
	return func(n *node) bool {
		return n.name == "g" && strings.Contains(" "+n.attr["class"]+" ", " "+class+" ")
	}
}

func allText(n *node) string {
	s := n.text
	for _, c := range n.children {
		s += allText(c)
	}
	return s
}

func TestCommtraceDrawsTheHang(t *testing.T) {
	dir := t.TempDir()
	writeSplitSkip(t, dir)
	out := t.TempDir()
	htmlPath, svgPath := filepath.Join(out, "hang.html"), filepath.Join(out, "hang.svg")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, run([]string{"-html", htmlPath, "-svg", svgPath, dir}, &stdout, &stderr), stderr.String())
	for _, path := range []string{htmlPath, svgPath} {
		t.Run(filepath.Ext(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			doc := parse(t, data)
			svgs := find(doc, func(n *node) bool { return n.name == "svg" })
			require.Len(t, svgs, 1)
			// Self-contained: no script, no reference to anything outside the file.
			require.Empty(t, find(doc, func(n *node) bool {
				return n.name == "script" || n.name == "link" || n.name == "image" || n.name == "img"
			}))
			require.Empty(t, find(doc, func(n *node) bool { return n.attr["href"] != "" || n.attr["src"] != "" }))

			comms := find(svgs[0], classed("communicator"))
			require.Len(t, comms, 3, "one per communicator")
			cause := comms[0]
			require.Equal(t, "communicator cause", cause.attr["class"], "the cause first")
			require.Equal(t, "mpi:0:split1", cause.attr["data-name"])
			require.Equal(t, "[0 2]", cause.attr["data-ranks"])
			culprits := find(cause, classed("culprit"))
			require.Len(t, culprits, 1)
			require.Equal(t, "2", culprits[0].attr["data-rank"])
			require.Contains(t, allText(culprits[0]), "rank 2: culprit")

			victim := comms[1]
			require.Equal(t, "communicator victim", victim.attr["class"])
			require.Equal(t, "mpi:0", victim.attr["data-name"])
			victims := find(victim, func(n *node) bool { return n.attr["class"] == "lane victim" })
			require.Len(t, victims, 1)
			require.Equal(t, "0", victims[0].attr["data-rank"])
			require.Contains(t, allText(victims[0]), `rank 0: victim, blocked in "mpi:0:split1" #3`)
			require.Empty(t, find(victim, classed("culprit")))

			// Where each rank stopped: rank 0 in the split's #3, started.
			stopped := find(cause, func(n *node) bool { return n.name == "rect" && strings.Contains(n.attr["class"], "stopped") })
			require.Len(t, stopped, 1, "rank 0 stopped in the split; rank 2 never called #3 there")
			require.Contains(t, allText(stopped[0]), "rank 0 #3 all_reduce: started")
			// Each lane shows its operations in sequence order.
			lanes := find(comms[2], classed("lane"))
			require.Len(t, lanes, 2)
			require.Equal(t, []string{"#1 all_reduce", "#2 all_reduce", "#3 all_reduce"}, opTexts(lanes[0]))
		})
	}
	html, err := os.ReadFile(htmlPath)
	require.NoError(t, err)
	require.Contains(t, string(html), "rank 2 skipped it", "the page holds the verdicts' text")
}

// opTexts returns the labels of a lane's operations, left to right.
func opTexts(lane *node) []string {
	var out []string
	for _, n := range lane.children {
		if n.name == "text" && strings.HasPrefix(n.text, "#") {
			out = append(out, n.text)
		}
	}
	return out
}
