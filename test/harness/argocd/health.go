// Package argocd runs vmop's Argo CD health check for VirtualMachines as
// Argo CD runs a health script from argocd-cm, so that Go tests check what
// Argo CD will run. The check itself, pkg/argocd/health.lua, stays where
// users and examples/argocd/vmop/argocd-cm.yaml find it, beside its cases
// in the layout of Argo CD's own resource_customizations: health_test.yaml
// and the VMs recorded on a real API server (testdata), which also show
// how kstatus, Flux's judge, reads each state.
package argocd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/vmop/vmop/test/harness/testcluster"
)

// Dir is the health check's directory, pkg/argocd of the module: health.lua,
// health_test.yaml and the recorded VMs (testdata).
func Dir() (string, error) {
	root, err := testcluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "pkg", "argocd"), nil
}

// Script is the health check, as the argocd-cm snippet holds it.
var Script = sync.OnceValues(func() (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, "health.lua"))
	return string(b), err
})

// Status is a health check's result: one of Argo CD's health codes
// (Healthy, Progressing, Suspended, Degraded, Missing, Unknown) and a
// message.
type Status struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// codes are the health codes Argo CD accepts from a script; it reports
// any other as Unknown.
var codes = []string{"Healthy", "Progressing", "Suspended", "Degraded", "Missing", "Unknown"}

// timeout is how long Argo CD lets a health script run.
const timeout = time.Second

// Health runs Script on obj, a VirtualMachine as the API server returns
// it (unstructured), and returns what it says. Like Argo CD (util/lua in
// argo-cd) it opens only the base, table and package libraries (a script
// in argocd-cm gets no others unless useOpenLibs is set), passes obj as
// the global table obj and stops the script after a second. A result that
// Argo CD would show as Unknown, or an error, is an error. Argo CD also
// lets require("os") load an os module of time and date only; a health
// that depends on the clock would flap, so Health leaves that out and the
// script does without.
func Health(obj map[string]any) (Status, error) {
	script, err := Script()
	if err != nil {
		return Status{}, err
	}
	return run(script, obj)
}

// run is Health with any script, for the tests of the sandbox.
func run(script string, obj map[string]any) (Status, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		// Argo CD shows the error without Lua's stack trace.
		var apiErr *lua.ApiError
		if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorRun {
			apiErr.StackTrace = ""
		}
		return Status{}, fmt.Errorf("health.lua: %w", err)
	}
	hs, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return Status{}, fmt.Errorf("health.lua: returned %s, not a table", l.Get(-1).Type())
	}
	var s Status
	for field, dst := range map[string]*string{"status": &s.Status, "message": &s.Message} {
		switch v := hs.RawGetString(field).(type) {
		case lua.LString:
			*dst = string(v)
		case *lua.LNilType:
		default:
			return Status{}, fmt.Errorf("health.lua: hs.%s is a %s, not a string", field, v.Type())
		}
	}
	if !slices.Contains(codes, s.Status) {
		return Status{}, fmt.Errorf("health.lua: hs.status %q is no Argo CD health code", s.Status)
	}
	return s, nil
}

// toLua converts a value of an unstructured object as Argo CD does:
// numbers (int64 from the API server, float64 from YAML) become Lua
// numbers, json.Number a string, lists sequences (nil items dropped),
// maps tables, anything else nil.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, item := range v {
			t.RawSetString(k, toLua(l, item))
		}
		return t
	}
	return lua.LNil
}
