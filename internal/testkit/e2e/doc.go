// Package e2e tests jetrun as users run it: real binaries in real processes
// against a real nats-server, killed with SIGKILL where a guarantee is about
// crashes. TestMain builds the binaries once (with -race when the tests run
// with -race).
package e2e
