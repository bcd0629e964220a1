package readmetest

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestGuidesManifestsParse: every ```yaml block of README.md and the guides (the
// Kubernetes manifests of docs/launching.md) is valid YAML naming an apiVersion, a kind
// and a metadata.name, as kubectl requires.
func TestGuidesManifestsParse(t *testing.T) {
	all := pages(t)
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	n := 0
	for _, page := range names {
		var cur []string
		in, start := false, 0
		for i, l := range strings.Split(all[page], "\n") {
			switch {
			case !in && strings.TrimSpace(l) == "```yaml":
				in, start, cur = true, i+2, nil
			case in && strings.TrimSpace(l) == "```":
				in = false
				n++
				var doc struct {
					APIVersion string `yaml:"apiVersion"`
					Kind       string `yaml:"kind"`
					Metadata   struct {
						Name string `yaml:"name"`
					} `yaml:"metadata"`
				}
				err := yaml.Unmarshal([]byte(strings.Join(cur, "\n")), &doc)
				require.NoError(t, err, "%s:%d", page, start)
				assert.NotEmpty(t, doc.APIVersion, "%s:%d: no apiVersion", page, start)
				assert.NotEmpty(t, doc.Kind, "%s:%d: no kind", page, start)
				assert.NotEmpty(t, doc.Metadata.Name, "%s:%d: no metadata.name", page, start)
			case in:
				cur = append(cur, l)
			}
		}
	}
	assert.GreaterOrEqual(t, n, 3, "the launching guide's Kubernetes manifests")
}
