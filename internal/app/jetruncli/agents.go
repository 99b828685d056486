package jetruncli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/jetrun/jetrun/internal/engine/registry"
)

func init() { commands["agents"] = (*cli).agentsCmd }

// agentsCmd lists the live agent types, or prints their tool definitions.
func (c *cli) agentsCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	tools := fs.String("tools", "", "print LLM tool definitions instead: openai, anthropic or mcp")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 0 {
			return 0, usagef("takes no arguments")
		}
		list, err := c.client.Agents(ctx)
		if err != nil {
			return 0, err
		}
		if *tools != "" {
			v, err := registry.Tools(list, *tools)
			if err != nil {
				return 0, usagef("%v", err)
			}
			return ExitOK, c.printJSON(v)
		}
		if c.json {
			return ExitOK, c.printJSON(list)
		}
		if len(list) == 0 {
			fmt.Fprintln(c.out, "no live agent types")
			return ExitOK, nil
		}
		tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tWORKERS\tINPUT SCHEMA\tOUTPUT SCHEMA\tDESCRIPTION")
		for _, a := range list {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", a.AgentType, a.Workers, yesNo(len(a.InputSchema) > 0),
				yesNo(len(a.OutputSchema) > 0), oneLine(a.Description, 80))
		}
		return ExitOK, tw.Flush()
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
