// Package store holds Gantry's persistence: store/pebble (the embedded default), store/keydir
// (API keys and users as files, so `gantry keys create` works while the server runs) and
// store/storetest (the suite every store implementation passes).
package store
