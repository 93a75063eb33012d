// Package httpguard is who may read an HTTP listener of gttsplit's: anyone
// on a loopback address, the holder of http.token on any other.
package httpguard

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Guard is who may read an HTTP listener (the aggregator's, a
// collector's). On a loopback address anyone may (there is no login). On
// any other address every path it wraps needs Token: as "Authorization: Bearer TOKEN", as the cookie a
// first visit with ?token=TOKEN sets (that visit is redirected to the
// address without the token, so it stays out of the history), or with no
// Token configured not at all (403). /healthz and /readyz are not wrapped.
type Guard struct {
	Token    string
	Loopback bool
}

const cookieName = "gttsplit_token"

// Wrap returns next behind the guard.
func (g Guard) Wrap(next http.Handler) http.Handler {
	if g.Loopback {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.Token == "" {
			http.Error(w, "on a non-loopback address this path is served only with http.token set (GTTSPLIT_HTTP_TOKEN)", http.StatusForbidden)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" {
			if !g.ok(q) {
				http.Error(w, "wrong token", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: q, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			u := *r.URL
			v := u.Query()
			v.Del("token")
			u.RawQuery = v.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if tok, ok := bearer(r.Header.Get("Authorization")); ok && g.ok(tok) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(cookieName); err == nil && g.ok(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="gttsplit"`)
		http.Error(w, "this path needs the token of http.token: send Authorization: Bearer TOKEN, or open the page once with ?token=TOKEN", http.StatusUnauthorized)
	})
}

// bearer returns the token of an Authorization value of the Bearer
// scheme. The scheme is case-insensitive and one or more spaces follow it
// (RFC 9110 section 11.4): "Bearer T", "bearer T" and "BEARER  T" all give
// T.
func bearer(h string) (string, bool) {
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok := strings.TrimLeft(rest, " ")
	return tok, tok != ""
}

func (g Guard) ok(s string) bool {
	return subtle.ConstantTimeCompare([]byte(s), []byte(g.Token)) == 1
}

// Listen listens on addr (host:port) and reports whether the listener is
// on a loopback address, which decides what a Guard asks for. A port in
// use is said with what to do about it. The commands listen before they
// start anything else, so a busy port is found at once.
func Listen(addr string) (net.Listener, bool, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, false, fmt.Errorf("http.listen: %w (is another aggregator, a collector or another program listening there? give --http another port, or --http '' for none)", err)
	}
	if err != nil {
		return nil, false, fmt.Errorf("http.listen: %w", err)
	}
	a, ok := ln.Addr().(*net.TCPAddr)
	return ln, ok && a.IP.IsLoopback(), nil
}

// Serve serves h on ln in the background (headers within 10 s), logging
// the error that ends it, and returns the server to close.
func Serve(ln net.Listener, h http.Handler, log zerolog.Logger) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	return srv
}

// MountProfiles serves the Go runtime's profiles (net/http/pprof: heap,
// allocs, goroutine, profile, trace, ...) under /debug/pprof/ on mux,
// behind g: open on a loopback address, the token's elsewhere. They say
// much about the process (its command line, its memory), so they are
// served only where http.pprof turns them on.
func MountProfiles(mux *http.ServeMux, g Guard) {
	mux.Handle("GET /debug/pprof/", g.Wrap(http.HandlerFunc(pprof.Index)))
	mux.Handle("GET /debug/pprof/cmdline", g.Wrap(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("GET /debug/pprof/profile", g.Wrap(http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /debug/pprof/symbol", g.Wrap(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("GET /debug/pprof/trace", g.Wrap(http.HandlerFunc(pprof.Trace)))
}
