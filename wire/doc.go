// Package wire builds the atelier processes with google/wire: one injector
// per process (InitGateway, InitWorker, InitClusterWorker), each returning
// the process, a cleanup func and an error. wire_gen.go is generated (`make
// generate`) and committed; wire.go holds the injector declarations.
package wire
