package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runMainEnv makes the test binary run bindgen's main with its arguments (see TestMain).
const runMainEnv = "BINDGEN_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) != "" {
		flag.Parse()
		os.Args = append([]string{"bindgen"}, flag.Args()...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestEverySubcommandHelpPrintsUsageAndExitsZero runs the command itself (in a child
// process) with -h after each subcommand: the usage on standard output, nothing on
// standard error, exit status 0.
func TestEverySubcommandHelpPrintsUsageAndExitsZero(t *testing.T) {
	for _, sub := range []string{"generate", "diff", "history", "help"} {
		for _, h := range []string{"-h", "-help", "--help"} {
			var out bytes.Buffer
			err := run([]string{sub, h}, &out)
			require.ErrorIs(t, err, flag.ErrHelp, "bindgen %s %s", sub, h)
			assert.Contains(t, out.String(), "bindgen "+sub, "bindgen %s %s", sub, h)

			cmd := exec.Command(os.Args[0], "-test.run=^$", "--", sub, h)
			cmd.Env = append(os.Environ(), runMainEnv+"=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "bindgen %s %s: exit status\nstdout: %s\nstderr: %s", sub, h, &stdout, &stderr)
			assert.Empty(t, stderr.String(), "bindgen %s %s: stderr", sub, h)
			for _, want := range []string{"bindgen generate [-root DIR] [-cache DIR] CONFIG.json...", "bindgen diff OLD.txt NEW.txt", "bindgen history [-root DIR] [-o FILE] CONFIG.json"} {
				assert.Contains(t, stdout.String(), want, "bindgen %s %s", sub, h)
			}
		}
	}
}
