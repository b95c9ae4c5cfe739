package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/server/store"
)

// newServerNodeCmd is `flowlb server node`: the bindings of node names to
// the identities last issued for them, in the servers' database.
func newServerNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Show or release the node names bound to identities",
		Long: `A node name is bound to the identity the servers last issued for it: the
bootstrap token does not enroll the name again while that identity is valid,
and only that identity renews it. These commands work on the servers'
database, with the server's flags or its --config file (its data directory
or --database; every replica sees the change at once).`,
		Args: cobra.NoArgs,
	}
	forget := nodeCmd("forget NAME...", "Release node names, so that the bootstrap token may enroll them again", cobra.MinimumNArgs(1), forgetNodes)
	forget.Long = `Release node names: the bootstrap token may enroll them again at once (for a
node that lost its identity directory), and the identities issued for them
before can no longer be renewed. Those stay valid until they expire: stop the
old agent first, or it enrolls the name again once its identity expires.`
	cmd.AddCommand(nodeCmd("list", "List the node names and the identities they are bound to", cobra.NoArgs, listNodes), forget)
	return cmd
}

// nodeCmd is a node subcommand running fn on the server's store; it takes
// every server flag (so that the server's configuration file applies),
// showing only those that find the database.
func nodeCmd(use, short string, args cobra.PositionalArgs, fn func(context.Context, io.Writer, store.Store, []string) error) *cobra.Command {
	o := server.Options{}
	var logLevel, agentSecret string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, names []string) error {
			st, err := openServerStore(cmd.Context(), o)
			if err != nil {
				return err
			}
			defer st.Close()
			return fn(cmd.Context(), cmd.OutOrStdout(), st, names)
		},
	}
	f := cmd.Flags()
	serverFlags(f, &o, &logLevel, &agentSecret)
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Name != "data-dir" && fl.Name != "database" {
			fl.Hidden = true
		}
	})
	return withConfig(cmd)
}

// openServerStore opens the database the server with options o uses; a
// SQLite file that does not exist is an error, not a new database.
func openServerStore(ctx context.Context, o server.Options) (store.Store, error) {
	dsn := o.Database
	if dsn == "" {
		dsn = filepath.Join(o.DataDir, "flowlb.db")
		if _, err := os.Stat(dsn); err != nil {
			return nil, fmt.Errorf("the server's database: %w (give the server's --data-dir, --database or --config)", err)
		}
	}
	st, err := store.Open(ctx, dsn, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, fmt.Errorf("open the server's database: %w", err)
	}
	return st, nil
}

func listNodes(ctx context.Context, w io.Writer, st store.Store, _ []string) error {
	nodes, err := st.NodeIdentities(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tIDENTITY\tSINCE")
	now := time.Now()
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n.Node, nodeState(n, now), n.Issued.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// nodeState says what a binding holds the name to.
func nodeState(n store.NodeIdentity, now time.Time) string {
	switch {
	case n.Released():
		return "released (the token may enroll it)"
	case now.After(n.NotAfter):
		return "expired " + n.NotAfter.UTC().Format(time.RFC3339) + " (the token may enroll it)"
	}
	return "valid until " + n.NotAfter.UTC().Format(time.RFC3339) + ", key " + shortKey(n.Key)
}

func shortKey(k string) string {
	if len(k) > 16 {
		return k[:16]
	}
	return k
}

func forgetNodes(ctx context.Context, w io.Writer, st store.Store, names []string) error {
	var errs []error
	for _, name := range names {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, errors.New("an empty node name"))
			continue
		}
		was, bound, err := st.ForgetNode(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("forget %s: %w", name, err))
			continue
		}
		if !bound {
			fmt.Fprintf(w, "%s: no identity was bound to it; released\n", name)
			continue
		}
		fmt.Fprintf(w, "%s: released; its identity (key %s, valid until %s) can no longer be renewed, and the bootstrap token may enroll %s again\n",
			name, shortKey(was.Key), was.NotAfter.UTC().Format(time.RFC3339), name)
	}
	return errors.Join(errs...)
}
