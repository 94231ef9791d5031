// Command gitserver serves Git over HTTP on loopback for the test ground: Debian's
// `git http-backend` behind Go's CGI handler, so source-controller clones GitRepositories over
// the smart HTTP protocol as it does in production.
//
// A push to ROOT-URL/NAME.git creates the bare repository NAME.git on first use, so tests and
// scripts only need `git push "$CONFLUX_GIT_URL/NAME.git"`. There is no authentication: the
// server listens on 127.0.0.1 only.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// repoName is the first path element, a bare repository's directory name.
var repoName = regexp.MustCompile(`^/([A-Za-z0-9][A-Za-z0-9._-]*\.git)(/|$)`)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
	root := flag.String("root", "", "directory holding the bare repositories")
	flag.Parse()
	if *root == "" {
		log.Fatal("gitserver: -root is required")
	}
	if err := os.MkdirAll(*root, 0o755); err != nil {
		log.Fatalf("gitserver: %v", err)
	}
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		log.Fatalf("gitserver: git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		log.Fatalf("gitserver: %v", err)
	}

	cgiHandler := &cgi.Handler{
		Path: backend,
		Env: []string{
			"GIT_PROJECT_ROOT=" + *root,
			"GIT_HTTP_EXPORT_ALL=1",
			// http-backend allows pushes only from an authenticated user.
			"REMOTE_USER=conflux-test",
		},
	}
	var mu sync.Mutex
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := repoName.FindStringSubmatch(r.URL.Path)
		if m == nil {
			http.NotFound(w, r)
			return
		}
		dir := filepath.Join(*root, m[1])
		if isPush(r) {
			mu.Lock()
			err := ensureRepo(dir)
			mu.Unlock()
			if err != nil {
				log.Printf("gitserver: creating %s: %v", m[1], err)
				http.Error(w, "cannot create repository", http.StatusInternalServerError)
				return
			}
		}
		cgiHandler.ServeHTTP(w, r)
	})

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("gitserver: %v", err)
	}
	fmt.Printf("gitserver: serving %s on http://%s\n", *root, ln.Addr())
	log.Fatal(http.Serve(ln, handler))
}

// isPush tells a push's requests: its ref advertisement and the pack upload.
func isPush(r *http.Request) bool {
	return r.URL.Query().Get("service") == "git-receive-pack" ||
		strings.HasSuffix(r.URL.Path, "/git-receive-pack")
}

// ensureRepo creates the bare repository dir unless it exists.
func ensureRepo(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		return nil
	}
	out, err := exec.Command("git", "init", "--quiet", "--bare", "--initial-branch=main", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
