package collector

import "crypto/rand"

type cryptoRand struct{}

func (cryptoRand) Read(b []byte) (int, error) { return rand.Read(b) }
