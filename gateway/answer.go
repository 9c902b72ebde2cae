package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/drainer-io/drainer/dispatch/mcp"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// answer is the answer about a settled call (docs/reference.md §13): the
// tool result recorded when its row settled, exactly as the first call got
// it; or, when the row holds none, an isError result naming the key and
// what a human must do. replay marks every answer but the one to the call
// that created the row. typed says the tool declares an outputSchema: a
// client then rejects a result that is not isError and has no
// structuredContent, so an answer without the tool's structuredContent is
// isError (its text and _meta saying what happened).
//
// whole, when not nil, is c's record already decoded (answersWhole): it is
// the answer, with its _meta.
func answer(c store.Call, whole *sdk.CallToolResult, replay, typed bool) *sdk.CallToolResult {
	meta := sdk.Meta{MetaKey: c.Key}
	if replay {
		meta[MetaReplay] = true
	}
	if whole != nil {
		whole.Meta = meta
		return whole
	}
	if len(c.Record) > 0 && (c.Status == outbox.StatusSucceeded || c.Status == outbox.StatusFailed) {
		if n, tooLarge := recordTooLarge(c.Record); tooLarge {
			return tooLargeAnswer(c, meta, n, typed)
		}
		if res, err := fromRecord(c.Record); err == nil {
			res.Meta = meta
			return res
		}
	}
	meta[MetaStatus] = string(c.Status)
	switch c.Status {
	case outbox.StatusSucceeded:
		// Settled without a tool result (resolved by an operator, say).
		if typed {
			return errorResult(meta, fmt.Sprintf("The call succeeded (key %s) and took effect once, but drainer holds no result of the tool "+
				"(the outcome was settled without one, by an operator, say): there is no structured result to give. Do not call it again "+
				"for it. Its response as stored: %s", c.Key, excerpt(c.Response)))
		}
		return textResult(meta, fmt.Sprintf("The call succeeded (key %s); its response as stored: %s", c.Key, excerpt(c.Response)))
	case outbox.StatusOutcomeUnknown:
		return errorResult(meta, fmt.Sprintf("The call may or may not have taken effect (key %s): %s. It is parked and will not be sent again: "+
			"a human must check with the tool's owner and run `drainer resolve %s --outcome succeeded --note ...` if it took effect, "+
			"or `drainer resolve %s --outcome failed --note ...` if it did not. Calling again answers the same until then.", c.Key, c.LastError, c.Key, c.Key))
	case outbox.StatusCancelled:
		return errorResult(meta, fmt.Sprintf("The call was cancelled before it was sent (key %s): its run was aborted or an operator cancelled it. Nothing was sent.", c.Key))
	case outbox.StatusCompensated:
		return errorResult(meta, fmt.Sprintf("The call took effect and was then undone by its compensation (key %s): its run was aborted.", c.Key))
	default:
		return errorResult(meta, fmt.Sprintf("The call failed and will not be sent again (key %s): %s. "+
			"A human can inspect it (`drainer inspect %s`) and requeue it (`drainer requeue %s`) once the cause is fixed.", c.Key, c.LastError, c.Key, c.Key))
	}
}

// answersWhole returns c's record decoded when c, a row's state as its
// completion wrote it (store.Settle; nil: none), is all its answer needs:
// a success whose record is the tool's result, not the note of one too
// large to keep. The answer is then the record's alone, the one a replay
// gives from the same bytes; it is decoded once, here, for both.
func answersWhole(c *store.Call) (*sdk.CallToolResult, bool) {
	if c == nil || c.Status != outbox.StatusSucceeded || len(c.Record) == 0 {
		return nil, false
	}
	if _, tooLarge := recordTooLarge(c.Record); tooLarge {
		return nil, false
	}
	res, err := fromRecord(c.Record)
	return res, err == nil
}

// tooLargeAnswer is the answer about a call whose result was too large to
// record (n bytes): a text saying so, with the result's structuredContent
// when the row's response holds it (the mcp adapter stores a result's
// structuredContent as the row's response, whole when it is within the
// response limit). A tool declaring an outputSchema whose structuredContent
// was not kept either is answered isError, saying the call took effect.
func tooLargeAnswer(c store.Call, meta sdk.Meta, n int64, typed bool) *sdk.CallToolResult {
	meta[mcp.MetaTooLarge] = n
	res := textResult(meta, fmt.Sprintf("The tool answered (%d bytes), more than drainer keeps of a result; the call took effect once (key %s, status %s). "+
		"Its response as stored: %s", n, c.Key, c.Status, excerpt(c.Response)))
	res.IsError = c.Status != outbox.StatusSucceeded
	if sc, ok := structuredResponse(c.Response); ok {
		res.StructuredContent = sc
	} else if typed && !res.IsError {
		meta[MetaStatus] = string(c.Status)
		res = errorResult(meta, fmt.Sprintf("The tool answered (%d bytes), more than drainer keeps of a result, its structured result too: "+
			"the call succeeded and took effect once (key %s), but drainer has no structured result to give. Do not call it again for it.", n, c.Key))
	}
	return res
}

// structuredResponse returns a row's response when it is a tool result's
// structuredContent: not what the mcp adapter stores otherwise, a
// result's {"content": [...]} or a response cut short or not storable as
// it is ({"body": "...", "truncated": ...}).
func structuredResponse(resp json.RawMessage) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(resp, &m) != nil || m == nil {
		return nil, false // none, null, or not an object (structuredContent is one)
	}
	_, hasBody := m["body"]
	_, hasTruncated := m["truncated"]
	_, hasContent := m["content"]
	if (len(m) == 2 && hasBody && hasTruncated) || (len(m) == 1 && hasContent) {
		return nil, false
	}
	return resp, true
}

// timedOut answers a call whose row had not settled within the wait.
func timedOut(c store.Call, wait time.Duration, replay bool) *sdk.CallToolResult {
	return errorResult(statusMeta(c, replay), fmt.Sprintf("The call is recorded (key %s) and has not finished within %s (status %s). "+
		"Call again with the same arguments to get its outcome; if it is sent again, it goes with the same idempotency key.", c.Key, wait, c.Status))
}

// answersBusy answers a call whose row settled with a large result that
// found no room among the large results being answered (budget.go)
// before its wait ended.
func answersBusy(c store.Call, replay bool) *sdk.CallToolResult {
	return errorResult(statusMeta(c, replay), fmt.Sprintf("The call has finished (key %s, status %s) and its result is large: this gateway was answering "+
		"as many large results as it holds at once until this call's wait ended. Call again with the same arguments to get it; it will not be sent again.", c.Key, c.Status))
}

// interrupted answers a call whose wait the gateway's shutdown ended
// before its row settled.
func interrupted(c store.Call, replay bool) *sdk.CallToolResult {
	return errorResult(statusMeta(c, replay), fmt.Sprintf("The call is recorded (key %s) and had not finished (status %s) when this drainer began shutting down. "+
		"Call again with the same arguments, here once it is back or through another replica, to get its outcome; if it is sent again, it goes with the same idempotency key.", c.Key, c.Status))
}

// statusMeta is the _meta of an answer about c's row without its result:
// its key and status, and the replay mark unless the call created it.
func statusMeta(c store.Call, replay bool) sdk.Meta {
	meta := sdk.Meta{MetaKey: c.Key, MetaStatus: string(c.Status)}
	if replay {
		meta[MetaReplay] = true
	}
	return meta
}

// pruned answers a call made before whose row has been pruned since.
func pruned(key string) *sdk.CallToolResult {
	return errorResult(sdk.Meta{MetaKey: key, MetaReplay: true},
		fmt.Sprintf("This call was made before (key %s) and its record has been pruned; it was not sent again. "+
			"A deliberate new call names its own _meta[%q].", key, MetaStepID))
}

// fromRecord decodes a record (mcp.Record) into a result, keeping its
// structuredContent as the server wrote it.
func fromRecord(rec json.RawMessage) (*sdk.CallToolResult, error) {
	var res sdk.CallToolResult
	if err := json.Unmarshal(rec, &res); err != nil {
		return nil, err
	}
	var raw struct {
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(rec, &raw); err != nil {
		return nil, err
	}
	res.StructuredContent = nil
	if len(raw.StructuredContent) > 0 {
		res.StructuredContent = raw.StructuredContent
	}
	if res.Content == nil {
		res.Content = []sdk.Content{}
	}
	return &res, nil
}

// recordTooLarge reports a record that says the result was not kept. A
// record that does not name the note's field (a tool's result, the rest)
// is not decoded.
func recordTooLarge(rec json.RawMessage) (int64, bool) {
	if !bytes.Contains(rec, tooLargeField) {
		return 0, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(rec, &m) != nil || len(m) != 1 {
		return 0, false
	}
	var n int64
	if v, ok := m[mcp.MetaTooLarge]; ok && json.Unmarshal(v, &n) == nil {
		return n, true
	}
	return 0, false
}

// tooLargeField is the field of a record that says the result was not
// kept, as JSON writes its name (mcp.Record; a jsonb column too).
var tooLargeField = []byte(`"` + mcp.MetaTooLarge + `"`)

func textResult(meta sdk.Meta, text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Meta: meta, Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

func errorResult(meta sdk.Meta, text string) *sdk.CallToolResult {
	res := textResult(meta, text)
	res.IsError = true
	return res
}

// excerpt is the start of a stored response, for a text answer.
func excerpt(b json.RawMessage) string {
	s := string(b)
	if s == "" {
		s = "null"
	}
	if len(s) > 2000 {
		s = s[:2000] + "…"
	}
	return s
}
