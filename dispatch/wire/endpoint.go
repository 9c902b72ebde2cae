package wire

import (
	"errors"
	"net/url"
	"strings"
)

// ParseEndpoint parses an adapter's endpoint: an absolute http or https URL
// without userinfo (credentials travel in headers) or fragment. Its errors
// never quote the URL, which may carry a secret.
func ParseEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, errors.New("not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("must be an absolute http:// or https:// URL")
	case u.User != nil:
		return nil, errors.New("must not contain userinfo; send credentials in headers")
	case u.Host == "":
		return nil, errors.New("must be an absolute http:// or https:// URL (the host is missing)")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, errors.New("must not contain a fragment")
	}
	return u, nil
}
