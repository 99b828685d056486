package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

// noticeHook is a webhook that takes finishes and milestone notices and
// records, per idempotency key, every call and every 2xx answer, in order.
type noticeHook struct {
	*httptest.Server
	mu       sync.Mutex
	calls    map[string]int
	answered map[string]int
	order    []string // keys in the order they were answered 2xx
	inFlight int
	onCall   func(key string) bool // false: hang until the caller goes away
}

func newNoticeHook(t *testing.T) *noticeHook {
	h := &noticeHook{calls: map[string]int{}, answered: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Kind      string `json:"kind"`
			RunID     string `json:"runId"`
			Status    string `json:"status"`
			Milestone struct {
				Name string `json:"name"`
			} `json:"milestone"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		key, want := r.Header.Get("Idempotency-Key"), body.RunID+"."+body.Status
		if body.Kind == "milestone" {
			want = body.RunID + ".milestone." + body.Milestone.Name
		}
		if key != want {
			http.Error(w, "bad idempotency key "+key, 400)
			return
		}
		h.mu.Lock()
		h.calls[key]++
		h.inFlight++
		onCall := h.onCall
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.inFlight--
			h.mu.Unlock()
		}()
		if onCall != nil && !onCall(key) {
			<-r.Context().Done()
			return
		}
		h.mu.Lock()
		h.answered[key]++
		h.order = append(h.order, key)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

// A parent-worker (the finish deliverer, which also turns milestones into
// notices) is killed with -9 between the runs' milestones and their
// notifications: mid-call on the first notice, with the runs still
// reaching milestones while no parent-worker runs. A new parent-worker
// delivers every listed milestone of every run, once per (run, milestone)
// apart from calls in flight at the kill, never an unlisted one, and each
// run's finish after its notices.
func TestParentWorkerKilledBetweenAMilestoneAndItsNotice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newNoticeHook(t)
	e.childWorker(t, "child-n", nil)

	var pwMu sync.Mutex
	var pw *proc
	killed := make(chan struct{})
	var inFlightAtKill int
	var once sync.Once
	hook.onCall = func(key string) bool {
		if !strings.Contains(key, ".milestone.") {
			return true
		}
		first := false
		once.Do(func() {
			first = true
			pwMu.Lock()
			pw.kill()
			pwMu.Unlock()
			hook.mu.Lock()
			inFlightAtKill = hook.inFlight
			hook.mu.Unlock()
			close(killed)
		})
		return !first
	}
	pwMu.Lock()
	pw = e.parentWorker(t, "pw-n1", hook.URL, nil)
	pwMu.Unlock()

	const n = 6
	listed := []string{"step-2", "step-4"}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%02d", i)
		e.dispatchDemo(t, ids[i], 5, 300, &events.Detached{OnFinish: "hook", OnMilestones: listed})
	}
	select {
	case <-killed:
	case <-time.After(60 * time.Second):
		t.Fatal("no milestone notice reached the webhook")
	}
	e.parentWorker(t, "pw-n2", hook.URL, nil)

	for _, id := range ids {
		row := jetruntest.WaitRow(t, e.store, id, 90*time.Second, func(r *model.Row) bool {
			return jetruntest.Delivered(r) && len(r.Notices) == len(listed) && len(r.PendingNotices()) == 0
		})
		for _, name := range listed {
			if row.Notices[name].DeliveredAt.IsZero() || row.Notices[name].Milestone.Name != name {
				t.Fatalf("run %s: notice %s: %+v", id, name, row.Notices[name])
			}
		}
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	extra := 0
	for key, c := range hook.answered {
		if c > 1 {
			extra += c - 1
		}
		for _, unlisted := range []string{"step-1", "step-3", "step-5"} {
			if strings.HasSuffix(key, ".milestone."+unlisted) {
				t.Fatalf("unlisted milestone notified: %s", key)
			}
		}
	}
	for _, id := range ids {
		finishAt := -1
		for i, key := range hook.order {
			if key == id+".completed" && finishAt < 0 {
				finishAt = i
			}
		}
		for _, name := range listed {
			key := id + ".milestone." + name
			if hook.answered[key] == 0 {
				t.Fatalf("notice %s never answered (calls %d)", key, hook.calls[key])
			}
			for i, k := range hook.order {
				if k == key && i > finishAt {
					t.Fatalf("run %s: notice %s answered after the finish: %v", id, name, hook.order)
				}
			}
		}
	}
	// A second 2xx for a key is possible only for a call in flight at the
	// kill whose answer the dead deliverer never recorded.
	if extra > inFlightAtKill {
		t.Fatalf("%d duplicate answers, more than the %d calls in flight at the kill: %v", extra, inFlightAtKill, hook.answered)
	}
	t.Logf("kill with %d calls in flight; %d duplicate answers; %d keys", inFlightAtKill, extra, len(hook.answered))
}
