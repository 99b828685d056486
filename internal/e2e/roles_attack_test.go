package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// The attacks of issue 22 on the shipped nats-users.conf, as the role that
// tries them; see docs/operations.md, "What each role can do".

// jsAs returns a JetStream context connected as user.
func jsAs(t *testing.T, url, user string) jetstream.JetStream {
	t.Helper()
	nc, err := roleConn(url, user, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// bucketKeys lists the keys of bucket (read as admin).
func bucketKeys(t *testing.T, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !strings.Contains(err.Error(), "no keys found") {
		t.Fatalf("keys of %s: %v", bucket, err)
	}
	slices.Sort(keys)
	return keys
}

// rollupRefused puts keys in jetrun's buckets as admin, then, as child,
// publishes `{}` with Nats-Rollup: all to one key of each: the write is
// refused and every key is still there.
func rollupRefused(t *testing.T, url string) {
	t.Helper()
	admin := jsAs(t, url, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for bucket, victim := range map[string]string{"jetrun_runs": "x", "jetrun_active": "run.x"} {
		kv, err := admin.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, err := kv.Put(ctx, fmt.Sprintf("keep%d", i), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		before := bucketKeys(t, admin, bucket)
		m := &nats.Msg{Subject: events.BucketSubject(bucket, victim), Data: []byte(`{}`), Header: nats.Header{}}
		m.Header.Set("Nats-Rollup", "all")
		if _, err := jsAs(t, url, "child").PublishMsg(ctx, m); err == nil || !strings.Contains(err.Error(), "rollup") {
			t.Errorf("child: a roll-up write to %s was not refused: %v", m.Subject, err)
		}
		if after := bucketKeys(t, admin, bucket); !slices.Equal(before, after) {
			t.Errorf("bucket %s: keys %v before the roll-up, %v after", bucket, before, after)
		}
	}
	for _, b := range []string{"jetrun_runs", "jetrun_active", "jetrun_agents"} {
		s, err := admin.Stream(ctx, events.BucketStream(b))
		if err != nil {
			t.Fatal(err)
		}
		if !events.Hardened(s.CachedInfo().Config) {
			t.Errorf("bucket %s allows roll-ups", b)
		}
	}
}

// A child cannot erase a bucket with one roll-up message, on the shipped
// nats.conf.
func TestRolesChildCannotRollUpABucket(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""}))
	pw.waitLog("parent-worker ready", 60*time.Second)
	rollupRefused(t, url)
}

// Buckets an earlier jetrun created (roll-ups allowed, the server's expiry
// markers on) are migrated when a parent-worker starts: it says so, and the
// roll-up is refused from then on.
func TestRolesOldBucketsAreMigratedAtStart(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	admin := jsAs(t, url, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range []string{"jetrun_runs", "jetrun_active", "jetrun_agents"} {
		// As the code before issue 22 created them.
		if _, err := admin.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1,
			Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""}))
	pw.waitLog("parent-worker ready", 60*time.Second)
	for _, b := range []string{"jetrun_runs", "jetrun_active", "jetrun_agents"} {
		if !strings.Contains(pw.stderr.String(), "bucket migrated: roll-ups refused from now on\" bucket="+b) {
			t.Errorf("parent-worker did not say it migrated %s", b)
		}
	}
	rollupRefused(t, url)
}
