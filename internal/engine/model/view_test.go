package model_test

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/jetrun/jetrun/internal/engine/model"
)

// bookkeeping are the stored fields a user does not read: the view of a
// row leaves them out (docs/protocol.md lists them).
var bookkeeping = []string{
	"handedOff", "blinks", "workerEpoch", "leaseUntil", "signalsSeen", "teardown", "dispatchSeq",
	"unindexed", "submitSeq", "stepUsage", "chargeMarks",
}

// slotBookkeeping are a ledger slot's stored fields a user does not read.
var slotBookkeeping = []string{"claimedBy", "claimedUntil", "seq", "resumed"}

func storedRow(t *testing.T) (*model.Row, map[string]any) {
	t.Helper()
	b, err := os.ReadFile("testdata/row.json")
	if err != nil {
		t.Fatal(err)
	}
	var r model.Row
	var m map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &r, m
}

// TestViewIsTheStoredRowWithoutBookkeeping: a row's view, in JSON, is the
// stored row with the engine's bookkeeping left out: every field a user
// reads keeps its name and value, and none is forgotten (the stored row has
// every field set).
func TestViewIsTheStoredRowWithoutBookkeeping(t *testing.T) {
	r, want := storedRow(t)
	for _, k := range bookkeeping {
		if _, ok := want[k]; !ok {
			t.Fatalf("testdata/row.json has no %q: the list of bookkeeping fields is stale", k)
		}
		delete(want, k)
	}
	for _, ledger := range []string{"finishes", "notices"} {
		for _, s := range want[ledger].(map[string]any) {
			for _, k := range slotBookkeeping {
				delete(s.(map[string]any), k)
			}
		}
	}
	b, err := json.Marshal(r.View())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		w, _ := json.MarshalIndent(want, "", "  ")
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Fatalf("view:\n%s\nwant the stored row without its bookkeeping:\n%s", g, w)
	}
}

// TestViewIsACopy: what a reader does to a view does not reach the row.
func TestViewIsACopy(t *testing.T) {
	r, _ := storedRow(t)
	before, _ := json.Marshal(r)
	v := r.View()
	v.Input[0], v.Output[0] = 'x', 'x'
	v.Detached.OnMilestones[0] = "x"
	v.Progress.Phase = "x"
	v.Merged[0], v.BudgetFrom[0] = "x", "x"
	v.Usage.InputTokens = -1
	for k := range v.Usage.Models {
		v.Usage.Models[k] = v.Usage.UsageTotals
	}
	v.Budget.Tokens, v.TreeUsage.CostMicros, v.Overrun.Used = -1, -1, -1
	for s := range v.Delivered {
		delete(v.Delivered, s)
	}
	for _, f := range v.Finishes {
		f.Attempts, f.LastError = -1, "x"
	}
	for _, n := range v.Notices {
		n.Attempts, n.Milestone.Data[0] = -1, 'x'
	}
	after, _ := json.Marshal(r)
	if !bytes.Equal(before, after) {
		t.Fatalf("changing a view changed the row:\n%s\nwas\n%s", after, before)
	}
	if (*model.Row)(nil).View() != nil {
		t.Fatal("a nil row views as a run")
	}
}
