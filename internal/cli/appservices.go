package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/apps/auction"
	"github.com/neptune-cluster/neptune/apps/forum"
	"github.com/neptune-cluster/neptune/apps/pcache"
)

// appServices are the built-in services that keep data in storage: a
// database DSN (forum, auction) or a directory (pcache), taken from
// services[i].storage, else kept under data_dir/service-<name>.
var appServices = map[string]func(storage string) (neptune.Service, error){
	"forum": func(dsn string) (neptune.Service, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		f, err := forum.Open(ctx, dsn)
		if err != nil {
			return neptune.Service{}, err
		}
		return f.Service(), nil
	},
	"auction": func(dsn string) (neptune.Service, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := auction.Open(ctx, dsn)
		if err != nil {
			return neptune.Service{}, err
		}
		return a.Service(), nil
	},
	"pcache": func(dir string) (neptune.Service, error) {
		c, err := pcache.Open(dir)
		if err != nil {
			return neptune.Service{}, err
		}
		return c.Service(), nil
	},
}

// hostsProgram says whether the entry hosts an external program or an
// app service rather than a plain built-in.
func (s ServiceConfig) hostsProgram() bool {
	return s.HTTP != nil || s.Exec != nil || appServices[s.Name] != nil
}

// validateApp checks storage, http and exec; where is "config: services[i]".
func (s ServiceConfig) validateApp(where string) error {
	switch {
	case s.HTTP != nil && s.Exec != nil:
		return fmt.Errorf("%s: set one of http and exec, not both", where)
	case (s.HTTP != nil || s.Exec != nil) && (builtins[s.Name] != nil || appServices[s.Name] != nil):
		return fmt.Errorf("%s.name: %q is a built-in service; give the external program another name", where, s.Name)
	case s.Storage != "" && appServices[s.Name] == nil:
		return fmt.Errorf("%s.storage is only for forum, auction and pcache, not %q", where, s.Name)
	case s.HTTP != nil:
		if err := s.HTTP.Validate(); err != nil {
			return fmt.Errorf("%s.%w", where, err)
		}
	case s.Exec != nil:
		if err := s.Exec.Validate(); err != nil {
			return fmt.Errorf("%s.%w", where, err)
		}
	}
	return nil
}

// service builds the service an entry names: a built-in, an app service on
// its storage, or an external program through an adapter.
func (s ServiceConfig) service(dataDir string) (neptune.Service, error) {
	switch {
	case s.HTTP != nil:
		return adapter.NewHTTP(s.Name, *s.HTTP)
	case s.Exec != nil:
		return adapter.NewExec(s.Name, *s.Exec)
	case appServices[s.Name] != nil:
		storage := s.Storage
		if storage == "" && dataDir != "" {
			dir := filepath.Join(dataDir, "service-"+s.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return neptune.Service{}, fmt.Errorf("config: services.%s: %w", s.Name, err)
			}
			storage = dir
			if s.Name != "pcache" {
				storage = filepath.Join(dir, s.Name+".sqlite")
			}
		}
		if storage == "" && s.Name == "pcache" {
			return neptune.Service{}, errors.New("config: services.pcache: set storage (a directory) or data_dir")
		}
		svc, err := appServices[s.Name](storage)
		if err != nil {
			return neptune.Service{}, fmt.Errorf("config: services.%s: %w", s.Name, err)
		}
		return svc, nil
	}
	return builtins[s.Name](), nil
}
