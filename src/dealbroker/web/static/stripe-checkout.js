// The Stripe checkout page (web/stripe_checkout.py). Stripe.js is loaded before this file.
// The card is set up with Stripe from the browser (confirmCardSetup); only the SetupIntent's id
// is posted to us. When our server's charge needs 3-D Secure, the page is rendered again with
// the PaymentIntent's client secret and confirmCardPayment completes it. Either way the buyer
// goes back to the deal, which waits for Stripe's confirmation: this script marks nothing paid.
"use strict";
(function () {
  const form = document.getElementById("stripe-checkout");
  if (!form) return;
  // Stripe's card fields and its error messages in the page's language (nb, sv or en).
  const locale = form.dataset.locale || "auto";
  const stripe = Stripe(form.dataset.publishableKey, { locale: locale });
  const error = document.getElementById("card-error");
  const showError = (message) => {
    error.textContent = message || form.dataset.failed;
    error.hidden = false;
  };

  if (form.dataset.intentSecret) {
    stripe.confirmCardPayment(form.dataset.intentSecret).then((result) => {
      if (result.error) showError(result.error.message);
      window.location.assign(form.dataset.waiting);
    });
    return;
  }

  const card = stripe.elements({ locale: locale }).create("card");
  card.mount("#card-element");
  let sent = false;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (sent) return;
    sent = true;
    stripe
      .confirmCardSetup(form.dataset.setupSecret, { payment_method: { card: card } })
      .then((result) => {
        if (result.error) {
          sent = false;
          showError(result.error.message);
          return;
        }
        form.elements.setup_intent.value = result.setupIntent.id;
        form.submit();
      });
  });
})();
