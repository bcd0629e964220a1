package main

import (
	"bytes"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHelpNamesEveryCommandAndArgument(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"--help"}, {"generate", "-h"}} {
		var out bytes.Buffer
		err := run(args, &out)
		require.ErrorIs(t, err, flag.ErrHelp, "%v exits 0", args)
		for _, want := range []string{"bindgen generate [-root DIR] [-cache DIR] CONFIG.json...", "bindgen diff OLD.txt NEW.txt", "bindgen help", "-root DIR", "-cache DIR"} {
			assert.Contains(t, out.String(), want, "%v", args)
		}
	}
}

func TestBadCommandLinesAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"generate"}, {"diff", "one.txt"}, {"generate", "-nosuchflag", "x.json"}} {
		err := run(args, &bytes.Buffer{})
		assert.True(t, errors.Is(err, errUsage), "%v: %v", args, err)
	}
}
