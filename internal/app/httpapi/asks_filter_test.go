package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/pkg/events"
)

// GET /v1/asks filters by tree (a nested run's ask is in its root's tree)
// and by age; an answer records who gave it (the caller's "by" and the
// name of the token it used, never the token), when, and the digest it
// answered, and a second answer's 409 names them.
func TestAsksByTreeAndAgeAndWhoAnswered(t *testing.T) {
	t.Parallel()
	const tok = "asks-write-token-0123456789"
	b, _ := setupAsks(t, func(c *httpapi.Config) { c.Tokens = map[string]httpapi.Role{tok: httpapi.RoleWrite} })
	send := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, b.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		if method != http.MethodGet {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			_ = json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	list := func(query string, n int) askList {
		t.Helper()
		var l askList
		deadline := time.Now().Add(30 * time.Second)
		for {
			if code := send("GET", "/v1/asks?"+query, "", &l); code != 200 {
				t.Fatalf("GET /v1/asks?%s: %d", query, code)
			}
			if len(l.Asks) == n && l.Total == n {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /v1/asks?%s: %+v; want %d asks", query, l, n)
			}
			time.Sleep(20 * time.Millisecond) // polling with a deadline
		}
	}
	for _, body := range []string{`{"agentType":"asker","runId":"t1","input":1}`, `{"agentType":"asker","runId":"t2","input":2}`,
		`{"agentType":"asker","runId":"k1","input":3,"parent":"t1","parentToolCallId":"c1"}`} {
		if code := send("POST", "/v1/runs", body, nil); code != 201 {
			t.Fatalf("POST /v1/runs %s: %d", body, code)
		}
	}
	list("status=open", 3)
	if l := list("status=open&tree=t1", 2); l.Asks[0].TreeID != "t1" || l.Asks[1].TreeID != "t1" {
		t.Fatalf("tree t1: %+v", l.Asks)
	}
	if l := list("tree=t2", 1); l.Asks[0].RunID != "t2" {
		t.Fatalf("tree t2: %+v", l.Asks)
	}
	list("status=open&olderThan=1h", 0)
	list("status=open&newerThan=1h", 3)

	name := func() string { sum := sha256.Sum256([]byte(tok)); return "token " + hex.EncodeToString(sum[:4]) }()
	for run, by := range map[string]string{"t2": "alice (" + name + ")", "k1": name} {
		a := list("runId="+run, 1).Asks[0]
		body := `{"digest":"` + a.Digest + `","value":{"n":1}`
		if strings.HasPrefix(by, "alice") {
			body += `,"by":"alice"`
		}
		before := time.Now().UTC()
		var got events.Ask
		if code := send("POST", "/v1/asks/"+a.ID+":answer", body+"}", &got); code != 200 {
			t.Fatalf("answer %s: %d", a.ID, code)
		}
		if got.Answer == nil || got.Answer.By != by || got.Answer.Digest != a.Digest || got.Answer.At.Before(before) ||
			strings.Contains(got.Answer.By, tok) {
			t.Fatalf("answer of %s: %+v; want by %q, at or after %s, digest %s", a.ID, got.Answer, by, before, a.Digest)
		}
		var e map[string]any
		if code := send("POST", "/v1/asks/"+a.ID+":answer", body+"}", &e); code != 409 || e["answeredBy"] != by ||
			e["answeredAt"] != got.Answer.At.Format(time.RFC3339Nano) {
			t.Fatalf("second answer of %s: %d %v; want 409 naming %q at %s", a.ID, code, e, by, got.Answer.At.Format(time.RFC3339Nano))
		}
	}
}
