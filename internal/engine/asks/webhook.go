package asks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/jetrun/jetrun/pkg/events"
)

// Webhook is a new-ask hook (KeeperConfig.Notify) that POSTs the ask as
// JSON to url, with headers Idempotency-Key (ask.<id>: the hook is at
// least once), Jetrun-Kind (ask), Jetrun-Run-Id and Jetrun-Ask-Id. A 2xx
// answer means delivered; anything else is tried again. client nil means
// http.DefaultClient (the keeper bounds each try).
func Webhook(url string, client *http.Client) func(ctx context.Context, a *events.Ask) error {
	if client == nil {
		client = http.DefaultClient
	}
	return func(ctx context.Context, a *events.Ask) error {
		body, err := json.Marshal(a)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "ask."+a.ID)
		req.Header.Set("Jetrun-Kind", "ask")
		req.Header.Set("Jetrun-Run-Id", a.RunID)
		req.Header.Set("Jetrun-Ask-Id", a.ID)
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("asks: post ask %s: %w", a.ID, err)
		}
		defer resp.Body.Close()
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("asks: post ask %s: %s: %s", a.ID, resp.Status, bytes.TrimSpace(head))
		}
		return nil
	}
}
