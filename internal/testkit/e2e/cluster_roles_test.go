//go:build cluster

package e2e_test

import (
	"testing"
	"time"
)

// The same on the shipped three-node cluster configuration, whose nodes
// include the same nats-users.conf.
func TestClusterChildCannotRollUpABucket(t *testing.T) {
	c := startCluster(t)
	pw := start(t, "parent-worker", mergeAll(roleEnv(c.url(), "parent"),
		map[string]string{"JETRUN_HTTP_ADDR": "", "JETRUN_REPLICAS": "3"}))
	pw.waitLog("parent-worker ready", 120*time.Second)
	rollupRefused(t, c.url())
}

// TestRolesCannotDeleteOrRepointConsumers on the shipped cluster.
func TestClusterRolesCannotDeleteOrRepointConsumers(t *testing.T) {
	c := startCluster(t)
	consumersKept(t, c.url(), map[string]string{"JETRUN_REPLICAS": "3"})
}

// TestRolesForgedFinalRowIsRepaired on the shipped cluster.
func TestClusterForgedFinalRowIsRepaired(t *testing.T) {
	c := startCluster(t)
	forgedRowRepaired(t, c.url(), map[string]string{"JETRUN_REPLICAS": "3"})
}

// TestRolesChildCannotRepointADispatchConsumer on the shipped cluster.
func TestClusterChildCannotRepointADispatchConsumer(t *testing.T) {
	c := startCluster(t)
	repointRefused(t, c.url(), map[string]string{"JETRUN_REPLICAS": "3"})
}

// TestRolesForgedFinishesAreNotDelivered on the shipped cluster.
func TestClusterForgedFinishesAreNotDelivered(t *testing.T) {
	c := startCluster(t)
	forgedFinishesRefused(t, c.url(), map[string]string{"JETRUN_REPLICAS": "3"})
}
