package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows/admission"
	"github.com/atelier-ml/atelier/workflows/endpoint"
	"github.com/atelier-ml/atelier/workflows/models"
)

// GoPipeline describes a native Go pipeline: a Temporal workflow function
// written with this package's building blocks (Begin, Run.Container, Run.End).
// Workers register it under Name and publish it to the catalogue so the REST
// API can start it by name.
type GoPipeline struct {
	Name        string
	Description string
	// Workflow is func(workflow.Context, In) (Out, error) with JSON-encodable
	// In and Out.
	Workflow any
}

// WorkflowRegistry is the part of worker.Worker this package needs.
type WorkflowRegistry interface {
	RegisterWorkflowWithOptions(w interface{}, options workflow.RegisterOptions)
}

// Register registers the generic declarative pipeline workflow and the given
// native Go pipelines under their stable names; a Go pipeline decodes its
// own input (see decodingWorkflow). A Workflow of the wrong shape panics, as
// the Temporal SDK's own registration does: it is a programming error.
func Register(reg WorkflowRegistry, pipelines ...GoPipeline) {
	reg.RegisterWorkflowWithOptions(PipelineWorkflow, workflow.RegisterOptions{Name: runstate.PipelineWorkflowName})
	reg.RegisterWorkflowWithOptions(ForEachBatchWorkflow, workflow.RegisterOptions{Name: ForEachBatchWorkflowName})
	reg.RegisterWorkflowWithOptions(admission.Workflow, workflow.RegisterOptions{Name: activities.AdmissionWorkflowName})
	reg.RegisterWorkflowWithOptions(endpoint.Workflow, workflow.RegisterOptions{Name: activities.EndpointWorkflowName})
	reg.RegisterWorkflowWithOptions(models.MoveAlias, workflow.RegisterOptions{Name: activities.MoveModelAliasWorkflowName})
	for _, p := range pipelines {
		fn, err := decodingWorkflow(p.Name, p.Workflow)
		if err != nil {
			panic(err)
		}
		reg.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: p.Name})
	}
}
