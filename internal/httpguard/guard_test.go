package httpguard

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The Authorization scheme is case-insensitive and may be followed by
// more than one space (RFC 9110 section 11.4); anything else is refused.
func TestBearerScheme(t *testing.T) {
	g := Guard{Token: "s3cret"}
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"Bearer s3cret", http.StatusNoContent},
		{"bearer s3cret", http.StatusNoContent},
		{"BEARER s3cret", http.StatusNoContent},
		{"bEaReR   s3cret", http.StatusNoContent},
		{"Bearer wrong", http.StatusUnauthorized},
		{"Bearer s3cret2", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearers3cret", http.StatusUnauthorized},
		{"Basic s3cret", http.StatusUnauthorized},
		{"s3cret", http.StatusUnauthorized},
		{"", http.StatusUnauthorized},
	} {
		r := httptest.NewRequest(http.MethodGet, "/runs", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, w.Code, tc.want)
		}
	}
}

// TestMountProfiles: the profiles are served behind the guard: to anyone
// on loopback, beyond it only with the token, refused with none set.
func TestMountProfiles(t *testing.T) {
	for _, tc := range []struct {
		g    Guard
		auth string
		want int
	}{
		{Guard{Loopback: true}, "", http.StatusOK},
		{Guard{Token: "s3cret"}, "", http.StatusUnauthorized},
		{Guard{Token: "s3cret"}, "Bearer s3cret", http.StatusOK},
		{Guard{}, "Bearer s3cret", http.StatusForbidden},
	} {
		mux := http.NewServeMux()
		MountProfiles(mux, tc.g)
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline"} {
			req := httptest.NewRequest(http.MethodGet, p, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%+v %s %q: %d, want %d", tc.g, p, tc.auth, rec.Code, tc.want)
			}
		}
	}
}
