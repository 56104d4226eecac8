// pulumi-language-python: a minimal Python language host for the Pulumi engine.
//
// Why this exists: the upstream host lives in its own Go module
// (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3), which the Go module proxy
// reachable from our build machines refuses to serve. Everything the host needs to do the real
// work ships in modules that *are* served:
//   - the gRPC protocol (sdk/v3/proto/go),
//   - virtualenv / pip / uv / poetry handling (sdk/v3/python/toolchain),
//   - the Python side (`pulumi-language-python-exec`, `pulumi.policy`, `pulumi.dynamic`) from the
//     sdk/v3 module zip and the `pulumi` wheel.
//
// This host implements what `pulumi preview/up/destroy/refresh/install/about` and Python policy
// packs use: Run, GetRequiredPackages/Plugins, InstallDependencies, RunPlugin (analyzers and
// Python plugins), About, GetProgramDependencies, GetPluginInfo, RuntimeOptionsPrompts.
// Code generation RPCs (GenerateProject/GeneratePackage/GenerateProgram/Pack/Link) are not
// implemented, so `pulumi new`/`pulumi package gen-sdk`/`pulumi convert` for Python do not work.
//
// It is built by scripts/toolchain/bootstrap.sh inside the Pulumi wrapper module.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	pbempty "google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/logging"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
)

// Exit code with which pulumi-language-python-exec signals "an error was already shown to the user".
const userActionableExitCode = 32

// Python snippet listing installed distributions that ship a pulumi-plugin.json (i.e. provider SDKs).
const listPluginsPy = `
import json, sys
from importlib import metadata
out = []
for dist in metadata.distributions():
    for f in (dist.files or []):
        if f.name != "pulumi-plugin.json":
            continue
        try:
            data = json.loads(f.read_text())
        except Exception:
            continue
        if not data.get("resource", False):
            continue
        data["_dist"] = dist.metadata["Name"]
        data["_distVersion"] = dist.version
        out.append(data)
json.dump(out, sys.stdout)
`

type pluginJSON struct {
	Resource         bool   `json:"resource"`
	Name             string `json:"name"`
	Version          string `json:"version"`
	Server           string `json:"server"`
	Parameterization *struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Value   []byte `json:"value"`
	} `json:"parameterization"`
	Dist        string `json:"_dist"`
	DistVersion string `json:"_distVersion"`
}

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	engineAddress string
	tracing       string
	execPath      string // path of pulumi-language-python-exec
}

func main() {
	var tracing string
	flag.StringVar(&tracing, "tracing", "", "Emit tracing to a Zipkin-compatible tracing endpoint")
	// Options historically passed as flags; accepted and ignored (options now arrive in ProgramInfo).
	flag.String("virtualenv", "", "ignored")
	flag.String("typechecker", "", "ignored")
	flag.String("toolchain", "", "ignored")
	flag.String("root", "", "ignored")
	// The engine may pass logging flags; glog (linked in via the SDK) already defines some of them.
	if flag.Lookup("logtostderr") == nil {
		flag.Bool("logtostderr", false, "Log to stderr instead of files")
	}
	if flag.Lookup("v") == nil {
		flag.Int("v", 0, "Log verbosity")
	}
	logflow := flag.Bool("logflow", false, "Flow logging settings to child processes")
	flag.Parse()
	verbose, _ := strconv.Atoi(flag.Lookup("v").Value.String())
	logging.InitLogging(flag.Lookup("logtostderr").Value.String() == "true", verbose, *logflow)

	engineAddress := ""
	if args := flag.Args(); len(args) > 0 {
		engineAddress = args[0]
	}

	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "could not determine executable path: %v\n", err)
		os.Exit(1)
	}
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	execPath := filepath.Join(filepath.Dir(self), "pulumi-language-python-exec")
	if _, err := os.Stat(execPath); err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-language-python-exec not found next to %s\n", self)
		os.Exit(1)
	}

	h := &host{engineAddress: engineAddress, tracing: tracing, execPath: execPath}
	cancel := make(chan bool)
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, h)
			return nil
		},
		Options: rpcutil.TracingServerInterceptorOptions(nil),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "could not start language host RPC server: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fmt.Fprintf(os.Stderr, "language host RPC stopped serving: %v\n", err)
		os.Exit(1)
	}
}

// options extracted from Pulumi.yaml `runtime.options`.
func optionString(opts *structpb.Struct, key string) string {
	if opts == nil {
		return ""
	}
	if v, ok := opts.AsMap()[key]; ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	return ""
}

func resolveToolchain(info *pulumirpc.ProgramInfo) (toolchain.Toolchain, error) {
	if info == nil {
		return toolchain.ResolveToolchain(toolchain.PythonOptions{Toolchain: toolchain.Pip})
	}
	opts := toolchain.PythonOptions{
		Root:       info.GetRootDirectory(),
		ProgramDir: info.GetProgramDirectory(),
		Virtualenv: optionString(info.GetOptions(), "virtualenv"),
	}
	switch strings.ToLower(optionString(info.GetOptions(), "toolchain")) {
	case "", "auto":
		opts.Toolchain = toolchain.Auto
	case "pip":
		opts.Toolchain = toolchain.Pip
	case "poetry":
		opts.Toolchain = toolchain.Poetry
	case "uv":
		opts.Toolchain = toolchain.Uv
	default:
		return nil, fmt.Errorf("unsupported python toolchain %q", optionString(info.GetOptions(), "toolchain"))
	}
	return toolchain.ResolveToolchain(opts)
}

func withEnv(cmd *exec.Cmd, kv ...string) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, kv...)
}

func (h *host) installedPlugins(ctx context.Context, info *pulumirpc.ProgramInfo) ([]pluginJSON, error) {
	tc, err := resolveToolchain(info)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}
	cmd, err := tc.Command(ctx, "-c", listPluginsPy)
	if err != nil {
		return nil, err
	}
	if info != nil && info.GetProgramDirectory() != "" {
		cmd.Dir = info.GetProgramDirectory()
	}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("listing python packages: %v: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("listing python packages: %w", err)
	}
	var plugins []pluginJSON
	if err := json.Unmarshal(out, &plugins); err != nil {
		return nil, fmt.Errorf("parsing python package list: %w", err)
	}
	for i := range plugins {
		if plugins[i].Version != "" && !strings.HasPrefix(plugins[i].Version, "v") {
			plugins[i].Version = "v" + plugins[i].Version
		}
	}
	return plugins, nil
}

func (h *host) GetRequiredPlugins(ctx context.Context,
	req *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	plugins, err := h.installedPlugins(ctx, req.GetInfo())
	if err != nil {
		return nil, err
	}
	resp := &pulumirpc.GetRequiredPluginsResponse{}
	for _, p := range plugins {
		if p.Parameterization != nil || p.Name == "" {
			continue
		}
		resp.Plugins = append(resp.Plugins, &pulumirpc.PluginDependency{
			Name: p.Name, Kind: "resource", Version: p.Version, Server: p.Server,
		})
	}
	return resp, nil
}

func (h *host) GetRequiredPackages(ctx context.Context,
	req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	plugins, err := h.installedPlugins(ctx, req.GetInfo())
	if err != nil {
		return nil, err
	}
	resp := &pulumirpc.GetRequiredPackagesResponse{}
	for _, p := range plugins {
		if p.Name == "" {
			continue
		}
		dep := &pulumirpc.PackageDependency{Name: p.Name, Kind: "resource", Version: p.Version, Server: p.Server}
		if p.Parameterization != nil {
			v := p.Parameterization.Version
			dep.Parameterization = &pulumirpc.PackageParameterization{
				Name: p.Parameterization.Name, Version: strings.TrimPrefix(v, "v"), Value: p.Parameterization.Value,
			}
		}
		resp.Packages = append(resp.Packages, dep)
	}
	return resp, nil
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	info := req.GetInfo()
	tc, err := resolveToolchain(info)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}

	program := req.GetProgram()
	rootDir := ""
	if info != nil {
		rootDir = info.GetRootDirectory()
		if info.GetProgramDirectory() != "" {
			program = filepath.Join(info.GetProgramDirectory(), info.GetEntryPoint())
		}
	}
	if program == "" {
		program = "."
	}

	args := []string{h.execPath,
		"--monitor", req.GetMonitorAddress(),
		"--engine", h.engineAddress,
		"--project", req.GetProject(),
		"--stack", req.GetStack(),
		"--pwd", req.GetPwd(),
		"--dry_run", strconv.FormatBool(req.GetDryRun()),
		"--parallel", strconv.Itoa(int(req.GetParallel())),
		"--organization", req.GetOrganization(),
		"--root_directory", rootDir,
	}
	if h.tracing != "" {
		args = append(args, "--tracing", h.tracing)
	}
	args = append(args, program)
	args = append(args, req.GetArgs()...)

	cmd, err := tc.Command(ctx, args...)
	if err != nil {
		return nil, err
	}
	config := req.GetConfig()
	if config == nil {
		config = map[string]string{} // the SDK expects a JSON object, never null
	}
	cfg, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	keys, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, err
	}
	withEnv(cmd, "PULUMI_CONFIG="+string(cfg), "PULUMI_CONFIG_SECRET_KEYS="+string(keys))
	cmd.Dir = req.GetPwd()
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr

	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ee.ExitCode() == userActionableExitCode {
				return &pulumirpc.RunResponse{Bail: true}, nil
			}
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("Program exited with non-zero exit code: %d",
				ee.ExitCode())}, nil
		}
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("Problem executing program (could not run language executor): %v", err)}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

func (h *host) GetPluginInfo(ctx context.Context, req *pbempty.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

// streamWriter forwards writes to a gRPC stream as stdout or stderr chunks.
type streamWriter struct {
	mu   *sync.Mutex
	send func(b []byte) error
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := make([]byte, len(p))
	copy(buf, p)
	if err := w.send(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *host) InstallDependencies(req *pulumirpc.InstallDependenciesRequest,
	server grpc.ServerStreamingServer[pulumirpc.InstallDependenciesResponse],
) error {
	tc, err := resolveToolchain(req.GetInfo())
	if err != nil {
		return err
	}
	mu := &sync.Mutex{}
	stdout := streamWriter{mu, func(b []byte) error {
		return server.Send(&pulumirpc.InstallDependenciesResponse{Stdout: b})
	}}
	stderr := streamWriter{mu, func(b []byte) error {
		return server.Send(&pulumirpc.InstallDependenciesResponse{Stderr: b})
	}}
	dir := req.GetDirectory()
	if info := req.GetInfo(); info != nil && info.GetProgramDirectory() != "" {
		dir = info.GetProgramDirectory()
	}
	ctx := server.Context()
	if err := tc.InstallDependencies(ctx, dir, req.GetUseLanguageVersionTools(), true, stdout, stderr); err != nil {
		return err
	}
	if req.GetIsPlugin() {
		return tc.InstallPackage(ctx, dir, req.GetUseLanguageVersionTools(), true, stdout, stderr)
	}
	return nil
}

func (h *host) RuntimeOptionsPrompts(ctx context.Context,
	req *pulumirpc.RuntimeOptionsRequest,
) (*pulumirpc.RuntimeOptionsResponse, error) {
	return &pulumirpc.RuntimeOptionsResponse{}, nil
}

func (h *host) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	tc, err := resolveToolchain(req.GetInfo())
	if err != nil {
		return nil, err
	}
	info, err := tc.About(ctx)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.AboutResponse{
		Executable: info.PythonExecutable,
		Version:    info.PythonVersion.String(),
		Metadata:   map[string]string{"host": "llm-serving minimal python host"},
	}, nil
}

func (h *host) GetProgramDependencies(ctx context.Context,
	req *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	tc, err := resolveToolchain(req.GetInfo())
	if err != nil {
		return nil, err
	}
	pkgs, err := tc.ListPackages(ctx, req.GetTransitiveDependencies())
	if err != nil {
		return nil, err
	}
	resp := &pulumirpc.GetProgramDependenciesResponse{}
	for _, p := range pkgs {
		resp.Dependencies = append(resp.Dependencies, &pulumirpc.DependencyInfo{Name: p.Name, Version: p.Version})
	}
	return resp, nil
}

// RunPlugin runs a Python policy pack (kind "analyzer": `python -m pulumi.policy <engine> <dir>`) or a
// Python plugin project (other kinds: `python -u <dir>/<entry> <args...>`), streaming its output.
func (h *host) RunPlugin(req *pulumirpc.RunPluginRequest,
	server grpc.ServerStreamingServer[pulumirpc.RunPluginResponse],
) error {
	info := req.GetInfo()
	tc, err := resolveToolchain(info)
	if err != nil {
		return err
	}
	ctx := server.Context()
	if err := tc.ValidateVenv(ctx); err != nil {
		return err
	}
	programDir := req.GetProgram()
	entry := "."
	if info != nil && info.GetProgramDirectory() != "" {
		programDir = info.GetProgramDirectory()
		if info.GetEntryPoint() != "" {
			entry = info.GetEntryPoint()
		}
	}

	var cmd *exec.Cmd
	if req.GetKind() == "analyzer" {
		args := append([]string{"-u", "-m", "pulumi.policy"}, req.GetArgs()...)
		args = append(args, programDir)
		cmd, err = tc.Command(ctx, args...)
	} else {
		args := append([]string{"-u", filepath.Join(programDir, entry)}, req.GetArgs()...)
		cmd, err = tc.Command(ctx, args...)
	}
	if err != nil {
		return err
	}
	// The engine passes the full environment it wants the plugin to see.
	if env := req.GetEnv(); len(env) > 0 {
		base := cmd.Env // may carry the activated virtualenv PATH/VIRTUAL_ENV
		cmd.Env = append(append([]string{}, env...), base...)
		if base == nil {
			cmd.Env = env
		}
	}
	cmd.Dir = req.GetPwd()

	mu := &sync.Mutex{}
	cmd.Stdout = streamWriter{mu, func(b []byte) error {
		return server.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stdout{Stdout: b}})
	}}
	cmd.Stderr = streamWriter{mu, func(b []byte) error {
		return server.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stderr{Stderr: b}})
	}}
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return err
		}
		code = ee.ExitCode()
	}
	return server.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(code)}})
}

// Code generation is not supported by this host.
func (h *host) GenerateProject(context.Context, *pulumirpc.GenerateProjectRequest) (*pulumirpc.GenerateProjectResponse, error) {
	return nil, status.Error(codes.Unimplemented, "GenerateProject is not supported by this minimal python host")
}

var _ io.Writer = streamWriter{}
