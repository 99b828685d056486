package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// The inbox: the header counts the open asks; the inbox lists them with
// their payload and their run one click away; Approve answers in place,
// and the run goes on; an ask answered elsewhere shows who answered, live;
// the count follows.
func TestBrowserInbox(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_EMBEDDED_PORT": "-1",
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	api := newAPIClient(t, base)
	for _, id := range []string{"ui-ask-1", "ui-ask-2"} {
		api.dispatch(id, nil, map[string]int{"steps": 2, "stepMs": 50, "approveAt": 1})
	}

	b := newBrowser(t, chromium)
	b.do("open the runs list", chromedp.Navigate(base+"/"))
	b.waitTrue("two open asks counted in the header", `document.querySelector('[data-testid="ask-count"]').textContent === '2'`)
	eval[bool](b, `(document.querySelector('[data-testid="inbox-link"]').click(), true)`)
	card := func(id string) string {
		return fmt.Sprintf(`document.querySelector('[data-testid="ask"][data-run=%q]')`, id)
	}
	b.waitTrue("both asks listed", `document.querySelectorAll('[data-testid="ask"]').length === 2`)
	if p := eval[string](b, card("ui-ask-1")+`.querySelector('.ask-payload').textContent`); p == "" {
		t.Fatal("the ask shows no payload")
	}
	b.screenshot("inbox.png")

	eval[bool](b, `(`+card("ui-ask-1")+`.querySelector('[data-testid="ask-approve"]').click(), true)`)
	b.waitTrue("the ask answered in place", card("ui-ask-1")+`.querySelector('[data-testid="ask-state"]').textContent.startsWith('answered by')`)
	b.waitTrue("one open ask counted", `document.querySelector('[data-testid="ask-count"]').textContent === '1'`)

	// Answered elsewhere (the API, as bob): the card says so, live.
	var open struct {
		Asks []events.Ask `json:"asks"`
	}
	api.call("GET", "/v1/asks?runId=ui-ask-2", nil, &open)
	if len(open.Asks) != 1 {
		t.Fatalf("open asks of ui-ask-2: %+v", open.Asks)
	}
	api.call("POST", "/v1/asks/"+open.Asks[0].ID+":answer", map[string]any{"digest": open.Asks[0].Digest,
		"value": map[string]bool{"approved": false}, "by": "bob"}, nil)
	b.waitTrue("the other answer shown", card("ui-ask-2")+`.querySelector('[data-testid="ask-state"]').textContent === 'answered by bob'`)
	b.waitTrue("its buttons disabled", card("ui-ask-2")+`.querySelector('[data-testid="ask-approve"]').disabled`)
	b.waitTrue("no open ask counted", `document.querySelector('[data-testid="ask-count"]').textContent === '0'`)

	eval[bool](b, `(`+card("ui-ask-1")+`.querySelector('[data-testid="ask-run"]').click(), true)`)
	b.waitTrue("the approved run completes on its page", runStatusJS("completed"))
	if r := api.get("ui-ask-2"); r.Status != "error" {
		natstest.Eventually(t, 30*time.Second, func() bool { return api.get("ui-ask-2").Status == "error" },
			"the rejected run did not end error")
	}
}
