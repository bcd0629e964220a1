package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseFlags parses a subcommand's flags. -h, -help and --help print the usage to
// stdout and return flag.ErrHelp (main exits 0); any other flag error is a usage error.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}
