package subagent

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// Sessions: runs of one agent type under one session key (a dispatch's
// "session") are the turns of a persistent sub-agent session. A turn joins
// its session when its handler first reads the history: it appends a turn
// event to the session's subject, jetrun.run.<sessionId>.turn (sessionId
// derived from the agent type and the key, so it is a valid run id),
// deduplicated by Nats-Msg-Id <sessionId>.turn.<runId>; the turns before
// its own first turn event, in stream order, are its history. Reading them
// is a direct get by subject per turn (the stream's subject index), then a
// row get and the turn's steps (a direct get by subject each): an index,
// not a scan of other runs. A takeover reads the same history, since its
// first turn event stays where it was.

// KindTurn is the kind of a session's turn events.
const KindTurn = "turn"

// MaxSessionLength bounds a session key.
const MaxSessionLength = 256

// TurnEvent is a session's record of one turn.
type TurnEvent struct {
	RunID     string    `json:"runId"`
	AgentType string    `json:"agentType"`
	Session   string    `json:"session"`
	At        time.Time `json:"at"`
}

// Turn is an earlier turn of a session as a later one sees it.
type Turn struct {
	RunID   string          `json:"runId"`
	Status  events.Status   `json:"status"`
	Input   json.RawMessage `json:"input,omitempty"`
	Output  json.RawMessage `json:"output,omitempty"`
	Summary string          `json:"summary,omitempty"`
	Error   string          `json:"error,omitempty"`
	Steps   []events.Step   `json:"steps,omitempty"`
}

// SessionID is the id under which the session key of agentType keeps its
// turns: a valid run id, the same for every worker.
func SessionID(agentType, key string) string {
	sum := sha256.Sum256([]byte(agentType + "\x00" + key))
	return "ss-" + strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:20]))
}

// CheckSession says why key cannot name a session (nil when it can).
func CheckSession(key string) error {
	if len(key) > MaxSessionLength {
		return fmt.Errorf("session key is %d bytes long; the limit is %d", len(key), MaxSessionLength)
	}
	return nil
}

// JoinSession records runID as a turn of its session on subject (idempotent
// within the stream's duplicate window; a later duplicate is ignored by
// Turns).
func JoinSession(ctx context.Context, js jetstream.JetStream, subject, sessionID string, ev TurnEvent) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("subagent: encode turn of %s: %w", ev.RunID, err)
	}
	if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(sessionID+".turn."+ev.RunID)); err != nil {
		return fmt.Errorf("subagent: record run %s as a turn of session %q: %w", ev.RunID, ev.Session, err)
	}
	return nil
}

// TurnsBefore returns the run ids of the session's turns before runID's
// first turn, in order, each once; ok is false when runID has no turn
// event yet.
func TurnsBefore(ctx context.Context, stream jetstream.Stream, subject, runID string) (ids []string, ok bool, err error) {
	seen := map[string]bool{}
	for seq := uint64(1); ; {
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return ids, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("subagent: read turns on %s: %w", subject, err)
		}
		seq = m.Sequence + 1
		var ev TurnEvent
		if json.Unmarshal(m.Data, &ev) != nil || ev.RunID == "" {
			continue
		}
		if ev.RunID == runID {
			return ids, true, nil
		}
		if !seen[ev.RunID] {
			seen[ev.RunID] = true
			ids = append(ids, ev.RunID)
		}
	}
}
