package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrSchemaMismatch is returned (wrapped, with the validator's words) by
// Schema.Validate when a value does not match the schema, and so by the
// parent API and the worker for an input or output that does not match
// its agent type's schema.
var ErrSchemaMismatch = errors.New("does not match the schema")

// ErrBadSchema is returned by Compile for a document that is not a valid
// JSON Schema.
var ErrBadSchema = errors.New("not a valid JSON Schema")

// MaxSchemaBytes bounds one schema document.
const MaxSchemaBytes = 64 << 10

// Schema is a compiled JSON Schema (draft 2020-12 unless it says
// otherwise with $schema). References are resolved only within the
// document: a schema never makes the process read a file or a URL.
type Schema struct {
	raw json.RawMessage
	s   *jsonschema.Schema
}

// Compile compiles raw; an empty raw means no schema (nil, nil).
func Compile(raw json.RawMessage) (*Schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("%w: %d bytes; the limit is %d", ErrBadSchema, len(raw), MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSchema, err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no file or network access
	const loc = "jetrun:schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSchema, err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSchema, err)
	}
	return &Schema{raw: append(json.RawMessage(nil), raw...), s: s}, nil
}

// Raw returns the schema document.
func (s *Schema) Raw() json.RawMessage { return s.raw }

// Validate checks value against s. A nil s accepts anything. The error
// wraps ErrSchemaMismatch and says where and why, e.g.
// "at '/steps': got string, want integer".
func (s *Schema) Validate(value json.RawMessage) error {
	if s == nil {
		return nil
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("%w: not valid JSON: %v", ErrSchemaMismatch, err)
	}
	if err := s.s.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("%w: %s", ErrSchemaMismatch, describe(ve))
		}
		return fmt.Errorf("%w: %v", ErrSchemaMismatch, err)
	}
	return nil
}

// describe flattens a validation error into one line.
func describe(ve *jsonschema.ValidationError) string {
	out := ve.BasicOutput()
	var parts []string
	for _, e := range out.Errors {
		if e.Error == nil {
			continue
		}
		msg := e.Error.String()
		if strings.HasPrefix(msg, "validation failed") {
			continue
		}
		loc := e.InstanceLocation
		if loc == "" {
			loc = "/"
		}
		parts = append(parts, fmt.Sprintf("at '%s': %s", loc, msg))
	}
	if len(parts) == 0 {
		return strings.ReplaceAll(ve.Error(), "\n", "; ")
	}
	return strings.Join(parts, "; ")
}
