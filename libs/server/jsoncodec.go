package server

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// edgeCodecs replaces connect's JSON codecs with jsonCodec, so a JSON request that does not
// decode is answered like any other bad input: invalid_argument, message starting with the
// field. It belongs next to edgeErrors in every handler's options: the two work together.
func edgeCodecs() connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithCodec(jsonCodec{name: "json"}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8"}),
	)
}

// jsonCodec is connect's protojson codec made strict and legible. Strict: unknown fields and
// unknown enum names are errors (connect discards them, so {"mode":"MODE_BOGUS"} became
// "mode: must be set"). Legible: connect prefixes every codec error with "unmarshal message:"
// and protojson's text echoes whole tokens, a 1 MB string included, without naming the field
// of a bad duration. So a failed decode is not returned to connect at all: the message is
// reset and carries the rewritten error ("ttl: invalid value \"1m\": want …") in a marked
// unknown field, which edgeErrors turns into the request's error before any handler runs.
type jsonCodec struct{ name string }

// Name implements connect.Codec.
func (c jsonCodec) Name() string { return c.name }

// Marshal implements connect.Codec.
func (jsonCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("server: json codec: %T is not a proto.Message", m)
	}
	return protojson.Marshal(pm)
}

// MarshalAppend implements connect's marshalAppender.
func (jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("server: json codec: %T is not a proto.Message", m)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, pm)
}

// MarshalStable implements connect's stableCodec: protojson output, compacted.
func (c jsonCodec) MarshalStable(m any) ([]byte, error) {
	b, err := c.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// IsBinary implements connect's stableCodec.
func (jsonCodec) IsBinary() bool { return false }

// Unmarshal implements connect.Codec. It fails only for a message that is no proto.Message;
// a body that does not decode leaves the message carrying its error (see jsonCodec).
func (jsonCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("server: json codec: %T is not a proto.Message", m)
	}
	var msg string
	if len(bytes.TrimSpace(data)) == 0 {
		msg = "request body: is empty; send a JSON object ({} for no fields)"
	} else if err := protojson.Unmarshal(data, pm); err != nil {
		msg = describeJSONError(data, pm.ProtoReflect().Descriptor(), err)
	} else {
		return nil
	}
	proto.Reset(pm)
	pm.ProtoReflect().SetUnknown(markFailure(msg))
	return nil
}

// failureField is the field number of the marked unknown field that carries a decode error
// from jsonCodec to edgeErrors: the highest valid number, which no coordkit message uses.
const failureField = protowire.MaxValidNumber

// failureNonce starts every marked field's value, so a binary request that sets the field
// itself is not taken for a failed decode.
var failureNonce = func() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return b
}()

func markFailure(msg string) []byte {
	b := protowire.AppendTag(nil, failureField, protowire.BytesType)
	return protowire.AppendBytes(b, append(append([]byte(nil), failureNonce...), msg...))
}

// decodeFailure is the error jsonCodec left in m, or nil when m decoded (or is no message).
func decodeFailure(m any) error {
	pm, ok := m.(proto.Message)
	if !ok || pm == nil {
		return nil
	}
	u := pm.ProtoReflect().GetUnknown()
	for len(u) > 0 {
		num, typ, n := protowire.ConsumeTag(u)
		if n < 0 {
			return nil
		}
		u = u[n:]
		if num == failureField && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(u)
			if n < 0 {
				return nil
			}
			if msg, ok := bytes.CutPrefix(v, failureNonce); ok {
				return connect.NewError(connect.CodeInvalidArgument, errors.New(string(msg)))
			}
		}
		n = protowire.ConsumeFieldValue(num, typ, u)
		if n < 0 {
			return nil
		}
		u = u[n:]
	}
	return nil
}

// describeJSONError rewrites protojson's err about data, a request of type md, as
// "<field>: <reason>": the field is found by decoding each member on its own (protojson names
// it for some errors only), and the reason quotes at most a short prefix of the bad value.
// What no single field explains is "request body: …".
func describeJSONError(data []byte, md protoreflect.MessageDescriptor, err error) string {
	if msg, ok := locate(data, md, ""); ok {
		return msg
	}
	return "request body: " + protojsonReason(err)
}

// locate finds the member of the JSON object data (of type md, at path prefix) that does not
// decode and explains it; false when each member decodes on its own.
func locate(data []byte, md protoreflect.MessageDescriptor, prefix string) (string, bool) {
	here := strings.TrimSuffix(prefix, ".")
	if here == "" {
		here = "request body"
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return here + ": invalid JSON: " + jsonSyntax(err), true
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return here + ": want a JSON object, got " + showJSON(data), true
	}
	seen := map[protoreflect.FieldNumber]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return here + ": invalid JSON: " + jsonSyntax(err), true
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return here + ": invalid JSON: " + jsonSyntax(err), true
		}
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			fd = md.Fields().ByTextName(key)
		}
		if fd == nil {
			name := fieldName(prefix, key)
			if len(name) > 40 { // a quoted long key: no room left for the list
				return name + ": unknown field of " + string(md.Name()), true
			}
			return name + ": unknown field" + fieldList(md), true
		}
		path := prefix + string(fd.Name())
		if seen[fd.Number()] {
			return path + ": is set twice", true
		}
		seen[fd.Number()] = true
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			for i := range od.Fields().Len() {
				if f := od.Fields().Get(i); f != fd && seen[f.Number()] {
					return path + ": is in oneof " + string(od.Name()) + " with " + string(f.Name()) + ", which is set too", true
				}
			}
		}
		if probe(md, fd, raw) != nil {
			return explain(fd, raw, path), true
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return here + ": invalid JSON: " + jsonSyntax(err), true
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return here + ": invalid JSON: data after the object", true
	}
	return "", false
}

// probe decodes the one member fd: raw of a message md.
func probe(md protoreflect.MessageDescriptor, fd protoreflect.FieldDescriptor, raw []byte) error {
	name, _ := json.Marshal(fd.JSONName())
	obj := make([]byte, 0, len(name)+len(raw)+3)
	obj = append(append(append(append(append(obj, '{'), name...), ':'), raw...), '}')
	return protojson.Unmarshal(obj, dynamicpb.NewMessage(md))
}

// explain says why raw is no value of field fd at path.
func explain(fd protoreflect.FieldDescriptor, raw json.RawMessage, path string) string {
	if fd.IsList() {
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return path + ": want a JSON array, got " + showJSON(raw)
		}
		for i, el := range elems {
			one := append(append([]byte{'['}, el...), ']')
			if probe(fd.ContainingMessage(), fd, one) != nil {
				return explainValue(fd, el, path+"["+strconv.Itoa(i)+"]")
			}
		}
		return path + ": invalid value " + showJSON(raw)
	}
	if fd.IsMap() {
		return path + ": want a JSON object of " + wantOf(fd.MapValue()) + ", got " + showJSON(raw)
	}
	return explainValue(fd, raw, path)
}

// explainValue says why raw is no single value of fd at path.
func explainValue(fd protoreflect.FieldDescriptor, raw json.RawMessage, path string) string {
	if md := fd.Message(); md != nil && !wellKnown(md) && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		if msg, ok := locate(raw, md, path+"."); ok {
			return msg
		}
	}
	if fd.Kind() == protoreflect.StringKind && bytes.HasPrefix(raw, []byte(`"`)) {
		return path + ": must be valid UTF-8"
	}
	return path + ": invalid value " + showJSON(raw) + ": " + wantOf(fd)
}

func wellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

// wantOf says what JSON a value of fd is.
func wantOf(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		return "want " + enumNames(fd.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Duration":
			return `want a duration in seconds with an "s" suffix, like "60s" or "1.5s" (not "1m")`
		case "google.protobuf.Timestamp":
			return `want an RFC 3339 time, like "2026-01-02T15:04:05Z"`
		}
		return "want a JSON object (" + string(fd.Message().FullName()) + ")"
	case protoreflect.BoolKind:
		return "want true or false"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return "want an integer from -2147483648 to 2147483647"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "want an integer from 0 to 4294967295"
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return "want a 64-bit integer (a JSON number or a decimal string)"
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return "want an unsigned 64-bit integer (a JSON number or a decimal string)"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "want a number"
	case protoreflect.BytesKind:
		return "want a base64 string"
	}
	return "want a JSON string"
}

// enumNames lists an enum's named values but the zero one ("not set"), as far as they fit.
func enumNames(ed protoreflect.EnumDescriptor) string {
	var names []string
	n := 0
	for i := range ed.Values().Len() {
		v := ed.Values().Get(i)
		if v.Number() == 0 {
			continue
		}
		if n += len(v.Name()) + 2; n > 100 {
			names = append(names, "…")
			break
		}
		names = append(names, string(v.Name()))
	}
	if len(names) == 0 {
		return "a value of " + string(ed.FullName())
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// fieldList names md's fields for an unknown-field error, when they fit in a short line.
func fieldList(md protoreflect.MessageDescriptor) string {
	names := make([]string, md.Fields().Len())
	for i := range names {
		names[i] = string(md.Fields().Get(i).Name())
	}
	list := strings.Join(names, ", ")
	if len(names) == 0 {
		return " (" + string(md.Name()) + " has no fields)"
	}
	if len(list) > 100 {
		return " of " + string(md.Name())
	}
	return " (" + string(md.Name()) + " has " + list + ")"
}

// fieldName is an unknown key as an error message starts with it: as it is when it looks
// like a field name, quoted short otherwise.
func fieldName(prefix, key string) string {
	if key == "" || len(key) > MaxQuoteBytes {
		return prefix + Quote(key)
	}
	for _, r := range key {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return prefix + Quote(key)
		}
	}
	return prefix + key
}

// showJSON is a JSON value as an error message shows it: a string Go-quoted by Quote,
// anything else compacted and cut after MaxQuoteBytes.
func showJSON(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if bytes.HasPrefix(raw, []byte(`"`)) {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return Quote(s)
		}
	}
	var out bytes.Buffer
	if json.Compact(&out, raw) == nil {
		raw = out.Bytes()
	}
	return shorten(string(raw))
}

// shorten cuts s after MaxQuoteBytes between characters, with "…" and its length, and makes
// it valid UTF-8.
func shorten(s string) string {
	if len(s) <= MaxQuoteBytes {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := MaxQuoteBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:cut], "\uFFFD"), len(s))
}

// jsonSyntax is encoding/json's complaint, short; a body that stops early is io.EOF there.
func jsonSyntax(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "it ends before the value does"
	}
	return shorten(err.Error())
}

// protojsonReason is protojson's error without its "proto: (line 1:9): " prefix, short.
func protojsonReason(err error) string {
	s := strings.TrimPrefix(err.Error(), "proto:")
	s = strings.TrimLeft(s, " \u00a0") // protobuf-go randomizes this space
	s = strings.TrimPrefix(s, "syntax error ")
	if strings.HasPrefix(s, "(line ") {
		if i := strings.Index(s, "): "); i > 0 {
			s = s[i+3:]
		}
	}
	return shorten(s)
}
