package asks

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/jetrun/jetrun/pkg/events"
)

// Canonical returns raw as canonical JSON: no insignificant space, object
// keys sorted, numbers as written. Empty raw is null.
func Canonical(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not valid JSON: more than one value")
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Digest is the digest of payload: "sha256:" and the hex sha256 of its
// canonical JSON.
func Digest(payload json.RawMessage) (string, error) {
	canon, err := Canonical(payload)
	if err != nil {
		return "", fmt.Errorf("payload: %w", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ValueError is the error of an answer whose value does not fit the ask:
// Field is the JSON pointer of the offending field ("" for the whole
// value).
type ValueError struct {
	Field  string
	Reason string
}

// Error names the field and says what is wrong with it.
func (e *ValueError) Error() string {
	if e.Field == "" {
		return "answer: " + e.Reason
	}
	return fmt.Sprintf("answer: field %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrBadValue.
func (e *ValueError) Unwrap() error { return ErrBadValue }

// CheckValue returns value, canonical, if it fits ask a's kind: approve
// wants {"approved": bool}, choose {"choice": one of Choices}, a form a
// value matching its Schema (any JSON value without one). Anything else is
// a *ValueError.
func CheckValue(a *events.Ask, value json.RawMessage) (json.RawMessage, error) {
	canon, err := Canonical(value)
	if err != nil {
		return nil, &ValueError{Reason: err.Error()}
	}
	switch a.Kind {
	case events.AskApprove:
		var v map[string]any
		if json.Unmarshal(canon, &v) != nil || v == nil {
			return nil, &ValueError{Reason: `must be an object {"approved": true|false}`}
		}
		if _, ok := v["approved"].(bool); !ok {
			return nil, &ValueError{Field: "/approved", Reason: "must be true or false"}
		}
	case events.AskChoose:
		var v map[string]any
		if json.Unmarshal(canon, &v) != nil || v == nil {
			return nil, &ValueError{Reason: `must be an object {"choice": "…"}`}
		}
		c, ok := v["choice"].(string)
		if !ok || !slices.Contains(a.Choices, c) {
			return nil, &ValueError{Field: "/choice", Reason: fmt.Sprintf("must be one of %q", a.Choices)}
		}
	}
	if len(a.Schema) > 0 {
		if err := matchSchema(a.Schema, canon); err != nil {
			return nil, err
		}
	}
	return canon, nil
}

// matchSchema checks value against schema, naming the first field that
// breaks it. References resolve only within the document: a schema never
// makes the process read a file or a URL.
func matchSchema(schema, value json.RawMessage) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return fmt.Errorf("asks: the ask's schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	const loc = "jetrun:ask.json"
	if err := c.AddResource(loc, doc); err != nil {
		return fmt.Errorf("asks: the ask's schema: %w", err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return fmt.Errorf("asks: the ask's schema: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return &ValueError{Reason: "not valid JSON"}
	}
	err = s.Validate(inst)
	var ve *jsonschema.ValidationError
	if err == nil {
		return nil
	} else if !errors.As(err, &ve) {
		return &ValueError{Reason: err.Error()}
	}
	leaf := ve
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	path := leaf.InstanceLocation
	if req, ok := leaf.ErrorKind.(*kind.Required); ok && len(req.Missing) > 0 {
		path = append(slices.Clone(path), req.Missing[0])
	}
	field := ""
	if len(path) > 0 {
		field = "/" + strings.Join(path, "/")
	}
	return &ValueError{Field: field, Reason: leaf.ErrorKind.LocalizedString(message.NewPrinter(language.English))}
}
