// Package store holds Gantry's persistence: store/pebble (the embedded default), store/keydir
// (API keys and users as files, so `gantry keys create` works while the server runs),
// store/filedir (the files model jobs produce), store/memory (the non-job ports in memory, for
// tests) and store/storetest (one conformance suite per store port of core; every backend
// runs them all with storetest.RunAll).
package store
