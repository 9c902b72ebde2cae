package wire

import "testing"

func TestSensitiveHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "proxy-authorization": true, "X-Api-Key": true, "X-Auth-Token": true,
		"Cookie": true, "Set-Cookie": true, "X-Client-Secret": true, "X-Password": true,
		"X-Tenant": false, "Accept": false, "User-Agent": false, "X-Request-Source": false,
	} {
		if got := SensitiveHeader(name); got != want {
			t.Errorf("SensitiveHeader(%q) = %v", name, got)
		}
	}
}

func TestLiteralPassword(t *testing.T) {
	for raw, want := range map[string]bool{
		"postgres://app:hunter2@db/x":                         true,
		"postgres://app:${env:PW}@db/x":                       false,
		"postgres://app:${file:/run/secrets/pw}@db/x":         false,
		"postgres://app:pre${env:PW}@db/x":                    true,
		"postgres://app@db/x":                                 false,
		"postgres:///drainer?host=/var/run/postgresql":        false,
		"postgres://db/x?user=app&password=hunter2":           true,
		"postgres://db/x?user=app&password=${env:PW}":         false,
		"${env:DATABASE_URL}":                                 false,
		"host=db user=app password=hunter2":                   true,
		"host=db user=app password = 'hunter 2'":              true,
		"host=db user=app password=${env:PW}":                 false,
		"host=db user=app password='${env:PW}'":               false,
		"host=db user=app":                                    false,
		"nats://user:pw@nats:4222":                            true,
		"https://hooks.example.com/services/${env:HOOK_PATH}": false,
	} {
		if got := LiteralPassword(raw); got != want {
			t.Errorf("LiteralPassword(%q) = %v", raw, got)
		}
	}
}

// TestNoSecretInMessages loads configs where expanded values are wrong in
// every way a message could quote them, and checks that no error or
// warning reveals one.
