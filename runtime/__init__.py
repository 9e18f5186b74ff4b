"""What every kip process shares below the stages: settings and metrics."""
