// Package bench measures jetrun against raw JetStream on the same embedded,
// file-store nats-server in the same run, and reports ratios: make bench.
package bench
