// Package dispatchtest is the conformance suite every dispatch adapter runs.
//
// An adapter's test supplies a Factory that builds the adapter wired to a
// fresh Upstream (a scripted fake of the provider, or the real thing on a
// throwaway server) and hands it to Run:
//
//	func TestConformance(t *testing.T) {
//		dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
//			up := newFakeProvider(t)          // closed with t.Cleanup
//			a, err := mine.New(mine.Config{URL: up.URL, Token: "s3cr3t"})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return a, up, "s3cr3t"            // Run closes a
//		})
//	}
//
// Each check is a subtest with its own adapter and upstream: success, replay
// of the same message, the same key across retries, terminal refusals, a
// provider that never answers, an already cancelled context, concurrent
// dispatch (run the tests with -race), redaction of the payload and of the
// credential from every error, and goroutine leaks once the adapter is
// closed. The messages carry the tool name Tool; build more with NewMessage.
//
// The leak check snapshots the goroutines when a subtest starts, so Run must
// not overlap with other tests of the package that start goroutines (run it
// from a test that does not call t.Parallel), and servers shared by the
// whole test binary must be started before Run.
package dispatchtest
