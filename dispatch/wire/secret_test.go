package wire

import "testing"

// TestSensitiveHeader: a header named like a credential (auth, secret,
// token, key, password, signature, session, cookie, credential) is
// sensitive; author, authority and the idempotency key's headers are not.
func TestSensitiveHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "proxy-authorization": true, "X-Api-Key": true, "X-Auth-Token": true,
		"Cookie": true, "Set-Cookie": true, "X-Client-Secret": true, "X-Password": true,
		"X-Auth": true, "X-Session-Id": true, "X-Hub-Signature-256": true, "X-Signature": true,
		"X-Goog-Credential": true, "X-Passwd": true, "X-Authorize": true, "Auth": true,
		"X-Tenant": false, "Accept": false, "User-Agent": false, "X-Request-Source": false,
		"Idempotency-Key": false, "X-Idempotency-Key": false, "Content-Type": false,
		"X-Author": false, "X-Authority": false, "X-Request-Id": false,
	} {
		if got := SensitiveHeader(name); got != want {
			t.Errorf("SensitiveHeader(%q) = %v", name, got)
		}
	}
}

// TestCredentialParam: a query parameter named like a key, a token, a
// secret, a password or a signature is a credential; a sort key, the
// idempotency key and ordinary names are not.
func TestCredentialParam(t *testing.T) {
	for name, want := range map[string]bool{
		"api_key": true, "apiKey": true, "X-Api-Key": true, "key": true, "access_key": true, "subscription-key": true,
		"token": true, "access_token": true, "X-Amz-Security-Token": true, "secret": true, "client_secret": true,
		"password": true, "pwd": true, "sig": true, "signature": true, "X-Amz-Signature": true,
		"X-Amz-Credential": true, "auth": true, "authorization": true,
		"page": false, "sort_key": false, "idempotency_key": false, "keyword": false, "format": false,
		"author": false, "signal": false, "api-version": false,
	} {
		if got := CredentialParam(name); got != want {
			t.Errorf("CredentialParam(%q) = %v", name, got)
		}
	}
}

// TestInlineQuerySecret: a URL, as written, whose credential parameter has
// a literal value is found, named by its parameter; references and
// template variables are not literal.
func TestInlineQuerySecret(t *testing.T) {
	for raw, want := range map[string]string{
		"http://h/x?api_key=sekrit":                      "api_key",
		"http://h/x?page=2&token=abc#frag":               "token",
		"http://h/x?api%5Fkey=sekrit":                    "api_key",
		"http://h/x?sig=pre${env:SIG}":                   "sig",
		"http://h/x?api_key=${env:API_KEY}":              "",
		"http://h/x?sig=${file:/run/secrets/sig}&page=2": "",
		"http://h/{tool_name}?api_key={tool_name}":       "",
		"http://h/x?page=2&sort_key=name":                "",
		"http://h/x?api_key=":                            "",
		"http://h/x":                                     "",
		"${env:HOOK_URL}":                                "",
		"https://h/${env:PATH_WITH_QUERY}":               "",
		"https://h/x?${env:QUERY}":                       "",
	} {
		name, found := InlineQuerySecret(raw)
		if name != want || found != (want != "") {
			t.Errorf("InlineQuerySecret(%q) = %q, %v; want %q", raw, name, found, want)
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
