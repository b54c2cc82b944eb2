package cliutil

import (
	"errors"
	"io"
	"testing"

	"github.com/urfave/cli/v2"
)

func testApp() *cli.App {
	app := &cli.App{
		Name:      "prog",
		Writer:    io.Discard,
		ErrWriter: io.Discard,
		Commands: []*cli.Command{
			{Name: "setup", Subcommands: []*cli.Command{
				{Name: "docker", Flags: []cli.Flag{&cli.BoolFlag{Name: "dry-run"}}, Action: func(*cli.Context) error { return nil }},
				{Name: "secret", Hidden: true, Action: func(*cli.Context) error { return nil }},
			}},
			{Name: "status", Flags: []cli.Flag{&cli.BoolFlag{Name: "json"}, &cli.BoolFlag{Name: "v"}}, Action: func(*cli.Context) error { return nil }},
		},
		ExitErrHandler: func(*cli.Context, error) {}, // the test reads the error
	}
	Strict(app)
	return app
}

// A wrong command line gets one line naming what is wrong, the command it
// was given to and where the help is, and exit status 2; a right one runs.
func TestStrictAnswersOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "": no error
	}{
		{[]string{"prog", "status", "--json"}, ""},
		{[]string{"prog", "setup", "docker", "--dry-run"}, ""},
		{[]string{"prog", "bogus"}, `prog: no command "bogus"; commands: setup, status, help (see prog --help)`},
		{[]string{"prog", "setup", "bogus"}, `prog setup: no command "bogus"; commands: docker (see prog setup --help)`},
		{[]string{"prog", "status", "--bogus"}, "prog status: unknown flag --bogus (see prog status --help)"},
		{[]string{"prog", "status", "-x"}, "prog status: unknown flag -x (see prog status --help)"},
		{[]string{"prog", "setup", "docker", "--nope"}, "prog setup docker: unknown flag --nope (see prog setup docker --help)"},
	} {
		err := testApp().Run(c.args)
		if c.want == "" {
			if err != nil {
				t.Errorf("%q: %v, want it to run", c.args, err)
			}
			continue
		}
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != ExitUsage || err.Error() != c.want {
			t.Errorf("%q: %v (exit %v), want %q and exit %d", c.args, err, ec, c.want, ExitUsage)
		}
	}
}
