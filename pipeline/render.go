package pipeline

// Rendered is one execution of a step (or of one forEach item) with its
// templates evaluated: the field of the step's kind is set.
type Rendered struct {
	Container *Container
	Ray       *RayStep
	Spark     *SparkStep
	Inference *InferenceStep
	Pipeline  *ChildStep
}

// RenderStep evaluates s's templates for one execution (env.Item set for a
// forEach item) and checks the rendered size against the step limit. The
// pipeline workflow renders with it, and so does the render activity for
// steps whose templates read a wide step's outputs, so both render alike.
func RenderStep(s *Step, env Env) (Rendered, error) {
	var r Rendered
	var err error
	switch s.Kind {
	case KindRay:
		r.Ray, err = RenderRay(s.Ray, env)
	case KindSpark:
		r.Spark, err = RenderSpark(s.Spark, env)
	case KindInference:
		r.Inference, err = RenderInference(s.Inference, env)
	case KindPipeline:
		r.Pipeline, err = RenderChildStep(s.Pipeline, env)
	default:
		r.Container, err = RenderContainer(s.Container, env)
	}
	if err != nil {
		return r, err
	}
	switch {
	case r.Ray != nil:
		err = CheckRenderedSize(r.Ray)
	case r.Spark != nil:
		err = CheckRenderedSize(r.Spark)
	case r.Inference != nil:
		err = CheckRenderedSize(r.Inference)
	case r.Pipeline != nil:
		err = CheckRenderedSize(r.Pipeline)
	case r.Container != nil:
		err = CheckRenderedSize(r.Container)
	}
	return r, err
}

// RenderApproval renders an approval step's message (nil: the defaults).
func RenderApproval(a *ApprovalStep, env Env) (*ApprovalStep, error) {
	if a == nil {
		return nil, nil
	}
	r := *a
	var err error
	r.Message, err = RenderString(a.Message, env)
	return &r, err
}
