package envoy

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

// validator is what protoc-gen-validate generates on every Envoy message.
type validator interface{ ValidateAll() error }

// Validate checks a configuration message the way Envoy's schema does: the message's own
// ValidateAll (protoc-gen-validate rules), and the same for the message inside every
// google.protobuf.Any below it, at any depth — ValidateAll stops at an Any, whose content
// is opaque to it, and nearly everything Envoy configures (filters, transport sockets,
// protocol options, access logs) sits in one. An Any whose type is not linked into this
// binary is an error: it could not be checked. Errors name the field path.
func Validate(m proto.Message) error {
	var errs []error
	validateAt("", m.ProtoReflect(), &errs)
	return errors.Join(errs...)
}

func validateAt(path string, m protoreflect.Message, errs *[]error) {
	if v, ok := m.Interface().(validator); ok {
		if err := v.ValidateAll(); err != nil {
			*errs = append(*errs, fmt.Errorf("envoy: invalid %s at %s: %w", m.Descriptor().FullName(), orRoot(path), err))
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		fieldPath := joinPath(path, string(fd.Name()))
		switch {
		case fd.IsList():
			list := v.List()
			for i := range list.Len() {
				visit(fieldPath+"["+strconv.Itoa(i)+"]", list.Get(i).Message(), errs)
			}
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(fieldPath+"["+strconv.Quote(k.String())+"]", mv.Message(), errs)
				return true
			})
		default:
			visit(fieldPath, v.Message(), errs)
		}
		return true
	})
}

// visit descends into a field's message, opening an Any.
func visit(path string, m protoreflect.Message, errs *[]error) {
	if m.Descriptor().FullName() != "google.protobuf.Any" {
		validateAt(path, m, errs)
		return
	}
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		return
	}
	inner, err := a.UnmarshalNew()
	if errors.Is(err, protoregistry.NotFound) {
		*errs = append(*errs, fmt.Errorf("envoy: %s: type %s is not registered (import its package): it cannot be checked", path, a.GetTypeUrl()))
		return
	}
	if err != nil {
		*errs = append(*errs, fmt.Errorf("envoy: %s: %w", path, err))
		return
	}
	validateAt(path+"("+string(inner.ProtoReflect().Descriptor().Name())+")", inner.ProtoReflect(), errs)
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func orRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}
