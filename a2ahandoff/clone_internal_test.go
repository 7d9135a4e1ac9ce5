package a2ahandoff

import (
	"reflect"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
)

// cloneConfig copies every pointer and slice of a send configuration, so
// that Ask resends what was first sent whatever the application does with
// its own configuration afterwards (draft "Asking Again").
func TestCloneConfigIsDeep(t *testing.T) {
	if cloneConfig(nil) != nil {
		t.Fatal("nil configuration cloned to non-nil")
	}
	orig := &a2a.MessageSendConfig{
		AcceptedOutputModes: []string{"text/plain"},
		Blocking:            new(true),
		HistoryLength:       new(3),
		PushConfig:          &a2a.PushConfig{URL: "https://a.example/push", Auth: &a2a.PushAuthInfo{Schemes: []string{"Bearer"}, Credentials: "c"}},
	}
	c := cloneConfig(orig)
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone %+v differs from %+v", c, orig)
	}
	orig.AcceptedOutputModes[0] = "image/png"
	*orig.Blocking = false
	*orig.HistoryLength = 0
	orig.PushConfig.URL = "https://b.example/push"
	orig.PushConfig.Auth.Schemes[0] = "Basic"
	orig.PushConfig.Auth.Credentials = "d"
	want := &a2a.MessageSendConfig{
		AcceptedOutputModes: []string{"text/plain"},
		Blocking:            new(true),
		HistoryLength:       new(3),
		PushConfig:          &a2a.PushConfig{URL: "https://a.example/push", Auth: &a2a.PushAuthInfo{Schemes: []string{"Bearer"}, Credentials: "c"}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("the clone changed with the original: %+v", c)
	}
}
