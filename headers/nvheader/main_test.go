package main

import (
	"archive/zip"
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small NVIDIA/nccl source tree at tag v9.8.7-1: the same shape as the real one.
var fixture = map[string]string{
	"src/nccl.h.in": "#define NCCL_MAJOR ${nccl:Major}\n#define NCCL_MINOR ${nccl:Minor}\n#define NCCL_PATCH ${nccl:Patch}\n" +
		"#define NCCL_SUFFIX \"${nccl:Suffix}\"\n#define NCCL_VERSION_CODE ${nccl:Version}\nint ncclGetVersion(int *v);\n",
	"src/Makefile": "all: lib\n\n$(INCDIR)/nccl.h : nccl.h.in ../makefiles/version.mk\n" +
		"# NCCL_VERSION(X,Y,Z) ((X) * 10000 + (Y) * 100 + (Z))\n" +
		"\t@$(eval NCCL_VERSION := $(shell printf \"%d%02d%02d\" $(NCCL_MAJOR) $(NCCL_MINOR) $(NCCL_PATCH)))\n" +
		"\tmkdir -p $(INCDIR)\n" +
		"\tsed -e \"s/\\$${nccl:Major}/$(NCCL_MAJOR)/g\" \\\n" +
		"\t    -e \"s/\\$${nccl:Minor}/$(NCCL_MINOR)/g\" \\\n" +
		"\t    -e \"s/\\$${nccl:Patch}/$(NCCL_PATCH)/g\" \\\n" +
		"\t    -e \"s/\\$${nccl:Suffix}/$(NCCL_SUFFIX)/g\" \\\n" +
		"\t    -e \"s/\\$${nccl:Version}/$(NCCL_VERSION)/g\" \\\n" +
		"\t    $< > $@\n\nclean:\n\trm -rf build\n",
	"src/include/nccl_device/core.h": "NCCL_EXTERN_C __host__ ncclTeam_t ncclTeamWorld(ncclComm_t);\n",
	"makefiles/version.mk":           "##### version\nNCCL_MAJOR   := 9\nNCCL_MINOR   := 8\nNCCL_PATCH   := 7\nNCCL_SUFFIX  :=\nPKG_REVISION := 1\n",
}

const wantHeader = "#define NCCL_MAJOR 9\n#define NCCL_MINOR 8\n#define NCCL_PATCH 7\n#define NCCL_SUFFIX \"\"\n#define NCCL_VERSION_CODE 90807\nint ncclGetVersion(int *v);\n"

func githubServer(t *testing.T, files map[string]string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := strings.CutPrefix(r.URL.Path, "/NVIDIA/nccl/v9.8.7-1/")
		if text, found := files[p]; ok && found {
			_, _ = w.Write([]byte(text))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func opts(source, base string) options {
	return options{source: source, version: "9.8.7", pkg: "nvidia-nccl-cu12", githubBase: base, pypiBase: base, client: http.DefaultClient}
}

func TestGithubAppliesTheMakefileSubstitutions(t *testing.T) {
	srv := githubServer(t, fixture)
	h, err := fetch(opts("github", srv.URL))
	require.NoError(t, err)
	assert.Equal(t, wantHeader, string(h.data))
	assert.Equal(t, sum([]byte(wantHeader)), h.sha256)
	assert.Equal(t, "header\tnccl-9.8.7\tNVIDIA/nccl\tgithub\t-\tv9.8.7-1\tsrc/nccl.h.in\t"+h.sha256+"\t"+srv.URL+"/NVIDIA/nccl/v9.8.7-1/src/nccl.h.in",
		h.manifestLine("nccl-9.8.7"))
}

// A header nccl.h's set also pins (-file) is the repository's file at the tag, as it is,
// from github or a local clone, pinned with github's URL.
func TestFileIsTheRepositorysFileAtTheTag(t *testing.T) {
	const file = "src/include/nccl_device/core.h"
	want := fixture[file]
	line := "header\tnccl-9.8.7\tNVIDIA/nccl\tgithub\t-\tv9.8.7-1\t" + file + "\t" + sum([]byte(want)) + "\t"

	srv := githubServer(t, fixture)
	o := opts("github", srv.URL)
	o.file = file
	h, err := fetch(o)
	require.NoError(t, err)
	assert.Equal(t, want, string(h.data))
	assert.Equal(t, line+srv.URL+"/NVIDIA/nccl/v9.8.7-1/"+file, h.manifestLine("nccl-9.8.7"))

	if _, err := exec.LookPath("git"); err == nil {
		o = opts("git", "https://raw.githubusercontent.com")
		o.gitDir, o.file = gitClone(t), file
		h, err = fetch(o)
		require.NoError(t, err)
		assert.Equal(t, want, string(h.data))
		assert.Equal(t, line+"https://raw.githubusercontent.com/NVIDIA/nccl/v9.8.7-1/"+file, h.manifestLine("nccl-9.8.7"))
	}

	o = opts("github", srv.URL)
	o.file = "src/include/nccl_device/none.h"
	_, err = fetch(o)
	assert.ErrorContains(t, err, "404")
	o = opts("pypi", srv.URL)
	o.file = file
	_, err = fetch(o)
	assert.EqualError(t, err, "-file needs source github or git")
}

func TestGithubErrors(t *testing.T) {
	t.Run("missing file names the URL", func(t *testing.T) {
		files := map[string]string{"src/nccl.h.in": fixture["src/nccl.h.in"], "src/Makefile": fixture["src/Makefile"]}
		srv := githubServer(t, files)
		_, err := fetch(opts("github", srv.URL))
		require.Error(t, err)
		assert.Contains(t, err.Error(), srv.URL+"/NVIDIA/nccl/v9.8.7-1/makefiles/version.mk: 404")
	})
	t.Run("version.mk of another release", func(t *testing.T) {
		files := map[string]string{}
		for k, v := range fixture {
			files[k] = v
		}
		files["makefiles/version.mk"] = strings.Replace(fixture["makefiles/version.mk"], "7", "6", 1)
		_, err := fetch(opts("github", githubServer(t, files).URL))
		require.ErrorContains(t, err, "makefiles/version.mk says 9.8.6, not 9.8.7")
	})
	t.Run("placeholder the rule does not substitute", func(t *testing.T) {
		files := map[string]string{}
		for k, v := range fixture {
			files[k] = v
		}
		files["src/nccl.h.in"] += "#define X ${nccl:Prefix}\n"
		_, err := fetch(opts("github", githubServer(t, files).URL))
		require.ErrorContains(t, err, `unsubstituted "${nccl:Prefix}"`)
	})
	t.Run("bad version", func(t *testing.T) {
		o := opts("github", "http://127.0.0.1:1")
		o.version = "2.30"
		_, err := fetch(o)
		require.ErrorContains(t, err, `version "2.30" is not X.Y.Z`)
	})
}

func wheel(t *testing.T, name, text string) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for n, body := range map[string]string{"nvidia/nccl/lib/libnccl.so.2": "ELF", name: text} {
		w, err := zw.Create(n)
		require.NoError(t, err)
		_, err = w.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return b.Bytes()
}

func pypiServer(t *testing.T, whl []byte, digest string) *httptest.Server {
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/pypi/nvidia-nccl-cu12/9.8.7/json":
			_, _ = w.Write([]byte(`{"urls": [
				{"filename": "nvidia_nccl_cu12-9.8.7-py3-none-manylinux2014_aarch64.whl", "url": "` + srv.URL + `/files/arm.whl", "packagetype": "bdist_wheel", "digests": {"sha256": "00"}},
				{"filename": "nvidia_nccl_cu12-9.8.7.tar.gz", "url": "` + srv.URL + `/files/src.tar.gz", "packagetype": "sdist", "digests": {"sha256": "00"}},
				{"filename": "nvidia_nccl_cu12-9.8.7-py3-none-manylinux2014_x86_64.whl", "url": "` + srv.URL + `/files/x86.whl", "packagetype": "bdist_wheel", "digests": {"sha256": "` + digest + `"}}]}`))
		case "/files/x86.whl":
			_, _ = w.Write(whl)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestPypiTakesTheHeaderOutOfTheX86Wheel(t *testing.T) {
	whl := wheel(t, "nvidia/nccl/include/nccl.h", wantHeader)
	srv := pypiServer(t, whl, sum(whl))
	h, err := fetch(opts("pypi", srv.URL))
	require.NoError(t, err)
	assert.Equal(t, wantHeader, string(h.data))
	assert.Equal(t, "header\tnccl-9.8.7\tnvidia-nccl-cu12\tpypi\t-\t9.8.7\tnvidia/nccl/include/nccl.h\t"+sum([]byte(wantHeader))+"\t"+srv.URL+"/files/x86.whl",
		h.manifestLine("nccl-9.8.7"))
}

func TestPypiErrors(t *testing.T) {
	whl := wheel(t, "nvidia/nccl/include/nccl.h", wantHeader)
	_, err := fetch(opts("pypi", pypiServer(t, whl, "deadbeef").URL))
	require.ErrorContains(t, err, `PyPI publishes "deadbeef"`)
	other := wheel(t, "nvidia/nccl/include/other.h", "x")
	_, err = fetch(opts("pypi", pypiServer(t, other, sum(other)).URL))
	require.ErrorContains(t, err, "has no include/nccl.h")
	o := opts("pypi", pypiServer(t, whl, sum(whl)).URL)
	o.pkg = "nvidia-nccl-cu13"
	_, err = fetch(o)
	require.ErrorContains(t, err, "/pypi/nvidia-nccl-cu13/9.8.7/json: 404")
}

// TestGitTagReproducesDebianHeader checks the recipe against the real thing: nccl.h made
// from NVIDIA/nccl's tag equals the nccl.h Debian ships, byte for byte. It needs a clone
// of NVIDIA/nccl (NCCLGO_NCCL_GIT=its git directory) and the cached Debian header.
func TestGitTagReproducesDebianHeader(t *testing.T) {
	gitDir := os.Getenv("NCCLGO_NCCL_GIT")
	if gitDir == "" {
		t.Skip("set NCCLGO_NCCL_GIT to the git directory of a clone of github.com/NVIDIA/nccl (with tags)")
	}
	cache := os.Getenv("NCCLGO_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "ncclgo")
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
			cache = filepath.Join(x, "ncclgo")
		}
	}
	for _, v := range []string{"2.22.3", "2.29.7"} {
		debian, err := os.ReadFile(filepath.Join(cache, "header", "nccl-"+v, "nccl.h"))
		if err != nil {
			t.Skipf("Debian's nccl.h %s is not cached (make headers): %v", v, err)
		}
		o := opts("git", "https://raw.githubusercontent.com")
		o.version, o.gitDir = v, gitDir
		h, err := fetch(o)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(debian, h.data), "nccl.h %s from the tag differs from Debian's", v)
	}
}
