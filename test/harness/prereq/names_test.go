package prereq

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The tiers a test file under pkg/, cmd/ and internal/ is named for
// (docs/development.md, "Test tiers"): its name ends in _<tier>_test.go
// (or is <tier>_test.go) for the heaviest thing any test in it needs,
// lightest first. A plain name is the unit tier: plain Go, nothing else.
var tiers = []string{"tools", "apiserver", "qemu", "browser", "root"}

// needs maps a harness call (the last element of the package's import
// path, a dot, the function; "*" for any function) to the tier it needs.
// prereq.Commands and its kind are tools, or qemu when a program they
// name is qemu-system-*.
var needs = map[string]string{
	"prereq.Commands":            "tools",
	"prereq.Files":               "tools",
	"prereq.Installed":           "tools",
	"prereq.Beyond":              "tools",
	"xscreen.Start":              "tools",
	"gitserver.Start":            "tools",
	"prereq.ControlPlane":        "apiserver",
	"testcluster.New":            "apiserver",
	"testcluster.NewWithOptions": "apiserver",
	"testcluster.Start":          "apiserver",
	"vmtest.*":                   "apiserver",
	"testguest.*":                "qemu",
	"debianguest.Image":          "qemu",
	"debianguest.Disk":           "qemu",
	"prereq.KVM":                 "qemu",
	"headless.Start":             "browser",
	"prereq.Root":                "root",
	"testnode.Start":             "root",
	"testcontainerd.Start":       "root",
	"testcontainerd.Run":         "root",
}

// TestFileNamesSayTheirTier keeps the naming honest: a test file that
// calls one of needs, itself or through a helper of its package's test
// files, is named for that tier or a heavier one.
func TestFileNamesSayTheirTier(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root: %v", err)
	}
	dirs := map[string][]string{}
	for _, top := range []string{"pkg", "cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
				dirs[filepath.Dir(p)] = append(dirs[filepath.Dir(p)], p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checked := 0
	for _, dir := range slices.Sorted(maps.Keys(dirs)) {
		byFile := packageNeeds(t, dirs[dir])
		for _, file := range slices.Sorted(maps.Keys(byFile)) {
			need := byFile[file]
			checked++
			rel, _ := filepath.Rel(root, file)
			have := tierOf(filepath.Base(file))
			if need.tier == "" || rank(have) >= rank(need.tier) {
				continue
			}
			t.Errorf("%s needs %s (%s) but its name does not say so: name it %s (docs/development.md, Test tiers)",
				rel, need.tier, need.why, rename(filepath.Base(file), need.tier))
		}
	}
	if checked < 100 {
		t.Errorf("checked %d test files under pkg/, cmd/ and internal/; want more than 100: is the tree where this test looks (%s)?", checked, root)
	}
}

// tierOf is the tier that a file's name says, "" for a plain name.
func tierOf(base string) string {
	name := strings.TrimSuffix(base, "_test.go")
	word := name[strings.LastIndex(name, "_")+1:]
	if rank(word) >= 0 {
		return word
	}
	return ""
}

func rank(tier string) int {
	for i, t := range tiers {
		if t == tier {
			return i
		}
	}
	return -1
}

// rename is base with the tier's suffix instead of any it has.
func rename(base, tier string) string {
	name := strings.TrimSuffix(base, "_test.go")
	if have := tierOf(base); have != "" {
		name = strings.TrimSuffix(strings.TrimSuffix(name, have), "_")
	}
	if name == "" {
		return tier + "_test.go"
	}
	return name + "_" + tier + "_test.go"
}

type need struct{ tier, why string }

func heavier(a, b need) need {
	if rank(b.tier) > rank(a.tier) {
		return b
	}
	return a
}

// packageNeeds parses the test files of one directory and says what each
// needs: the heaviest of what its functions call, directly or through
// functions declared in the test files of the same package.
func packageNeeds(t *testing.T, files []string) map[string]need {
	t.Helper()
	type fn struct {
		pkg, file string
		direct    need
		calls     []string // names of functions of the package it calls
	}
	funcs := map[string]*fn{} // package name + "." + function name
	consts := map[string]string{}
	var all []*fn
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg := f.Name.Name
		imports := map[string]string{} // local name -> last element of the path
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := path.Base(p)
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = path.Base(p)
		}
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, v := range vs.Values {
						if lit, ok := v.(*ast.BasicLit); ok && i < len(vs.Names) {
							consts[pkg+"."+vs.Names[i].Name] = lit.Value
						}
					}
				}
			}
			this := &fn{pkg: pkg, file: file}
			all = append(all, this)
			if d, ok := decl.(*ast.FuncDecl); ok && d.Recv == nil {
				funcs[pkg+"."+d.Name.Name] = this
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch f := call.Fun.(type) {
				case *ast.Ident:
					this.calls = append(this.calls, pkg+"."+f.Name)
				case *ast.SelectorExpr:
					x, ok := f.X.(*ast.Ident)
					if !ok || imports[x.Name] == "" {
						return true
					}
					key := imports[x.Name] + "." + f.Sel.Name
					tier := needs[key]
					if tier == "" {
						tier = needs[imports[x.Name]+".*"]
					}
					if tier == "tools" && names(call, pkg, consts, "qemu-system") {
						tier = "qemu"
					}
					if tier != "" {
						this.direct = heavier(this.direct, need{tier, key})
					}
				}
				return true
			})
		}
	}
	// What each function needs through the functions it calls.
	memo := map[*fn]need{}
	var reach func(f *fn, seen map[*fn]bool) need
	reach = func(f *fn, seen map[*fn]bool) need {
		if n, ok := memo[f]; ok {
			return n
		}
		if seen[f] {
			return need{}
		}
		seen[f] = true
		n := f.direct
		for _, c := range f.calls {
			if g := funcs[c]; g != nil {
				via := reach(g, seen)
				if via.tier != "" && rank(via.tier) > rank(n.tier) {
					n = need{via.tier, via.why + " via " + strings.TrimPrefix(c, g.pkg+".")}
				}
			}
		}
		memo[f] = n
		return n
	}
	out := map[string]need{}
	for _, f := range all {
		out[f.file] = heavier(out[f.file], reach(f, map[*fn]bool{}))
	}
	return out
}

// names says whether an argument of call is a string, or a constant of
// the package, that holds s.
func names(call *ast.CallExpr, pkg string, consts map[string]string, s string) bool {
	for _, a := range call.Args {
		switch a := a.(type) {
		case *ast.BasicLit:
			if strings.Contains(a.Value, s) {
				return true
			}
		case *ast.Ident:
			if strings.Contains(consts[pkg+"."+a.Name], s) {
				return true
			}
		}
	}
	return false
}
