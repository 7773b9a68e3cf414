package redisconf

import (
	"net/url"
	"strings"
)

// redacted replaces every secret Redact hides.
const redacted = "xxxxx"

// Redact returns rawURL fit for logs and error messages: the password of its userinfo (all of
// a userinfo without ':', which some clients read as a password) and the values of password
// query parameters replaced by xxxxx. A string that is not a URL is hidden whole.
func Redact(rawURL string) string {
	if rawURL == "" {
		return ""
	}
	u, err := splitURL(rawURL)
	if err != nil {
		return "(invalid Redis URL, hidden)"
	}
	if u.hasUser {
		if user, _, ok := strings.Cut(u.userinfo, ":"); ok {
			u.userinfo = user + ":" + redacted
		} else {
			u.userinfo = redacted
		}
	}
	query := u.query
	if q, err := url.ParseQuery(u.query); err != nil {
		query = redacted
	} else {
		for k := range q {
			// password, sentinel_password, and any spelling of them go-redis would refuse
			// but an error or log line could still show
			if strings.Contains(strings.ToLower(k), "pass") {
				q.Set(k, redacted)
				query = q.Encode()
			}
		}
	}
	return u.rebuild(u.scheme, u.hosts, u.path, query)
}
