// Package bucket holds the JetStream operations on jetrun's KV buckets
// that nats.go's KeyValue does not offer: refusing roll-ups (Harden) and
// removing a key with a delete marker that expires (DeleteKey).
package bucket

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
)

// jetrun's KV buckets refuse roll-ups. A roll-up is a header
// (Nats-Rollup: all) on an ordinary write, so any credential that may
// write one key of a bucket that allows them could erase every key with
// one message: subject permissions cannot look at headers. Without
// roll-ups a bucket cannot have the server's expiry markers either
// (subject_delete_marker_ttl requires them), so a key is removed with a
// delete marker that carries its own TTL (DeleteKey) and a key that
// expires on its TTL vanishes without a marker: whoever needs to know
// when a key lapsed computes it from the TTL (kv's worker liveness).

// Hardened reports whether a bucket's stream refuses roll-ups and keeps
// per-message TTLs (which DeleteKey needs).
func Hardened(cfg jetstream.StreamConfig) bool {
	return !cfg.AllowRollup && cfg.SubjectDeleteMarkerTTL == 0 && cfg.AllowMsgTTL
}

// Harden makes the stream of bucket refuse roll-ups, if it does not
// yet (a bucket created by an earlier jetrun, or by nats.go's
// CreateKeyValue, which always allows them). It reports whether it changed
// anything. It needs the permission to update streams (the parent role).
func Harden(ctx context.Context, js jetstream.JetStream, bucket string) (bool, error) {
	s, err := js.Stream(ctx, wire.BucketStream(bucket))
	if err != nil {
		return false, fmt.Errorf("harden bucket %s: %w", bucket, err)
	}
	cfg := s.CachedInfo().Config
	if Hardened(cfg) {
		return false, nil
	}
	cfg.AllowRollup, cfg.SubjectDeleteMarkerTTL, cfg.AllowMsgTTL = false, 0, true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return false, fmt.Errorf("harden bucket %s: refuse roll-ups: %w", bucket, err)
	}
	return true, nil
}

// DeleteKey removes key from bucket with a delete marker (KV-Operation:
// DEL) that expires after ttl (at least a second). In a bucket of history
// 1, as jetrun's are, the marker replaces the key's value as a purge
// would, and watchers see a deletion. opts may add an expected last
// sequence (jetstream.WithExpectLastSequencePerSubject): a compare-and-set
// removal.
func DeleteKey(ctx context.Context, js jetstream.JetStream, bucket, key string, ttl time.Duration, opts ...jetstream.PublishOpt) error {
	m := &nats.Msg{Subject: wire.BucketSubject(bucket, key), Header: nats.Header{}}
	m.Header.Set("KV-Operation", "DEL")
	opts = append(opts, jetstream.WithMsgTTL(max(ttl, time.Second)))
	if _, err := js.PublishMsg(ctx, m, opts...); err != nil {
		return fmt.Errorf("delete key %s of bucket %s: %w", key, bucket, err)
	}
	return nil
}
