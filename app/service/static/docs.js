// /docs: Swagger UI on this service's OpenAPI (a file, not an inline script: the CSP allows none).
(function () {
  "use strict";
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapi,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    // "Try it out" signed in by the cookie: the header that marks a write as this page's own
    requestInterceptor: (request) => { request.headers["X-Requested-With"] = "swagger-ui"; return request; },
  });
})();
