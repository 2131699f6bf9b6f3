// Package scaleout tests several Gantry servers (replicas) sharing one PostgreSQL: what one
// replica writes, every other one reads, and a user's rate limit is one limit across them.
// It holds tests only; the servers are real ones (package server) on a real PostgreSQL
// started by internal/pgtest.
package scaleout
